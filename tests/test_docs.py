"""The version's one source, and the documentation pages generated from the code (docs/_hooks/generate.py):
every option of every command and every field of the result schemas must appear. The site itself is
built with `mkdocs build --strict` by .ci/run."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import llmbench

ROOT = Path(__file__).resolve().parent.parent


def pyproject_version() -> str:
    m = re.search(r'^version\s*=\s*"([^"]+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert m, "pyproject.toml has no version"
    return m.group(1)


def test_version_comes_from_pyproject():
    assert llmbench.__version__ == pyproject_version()
    out = subprocess.run([sys.executable, "-m", "llmbench", "info", "--json"], capture_output=True, text=True,
                         check=False, timeout=120)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["llmbench"] == pyproject_version()


# ---- the generated pages (docs/_hooks/generate.py) ----

def _hooks():
    import importlib.util

    spec = importlib.util.spec_from_file_location("llmbench_docs_hooks", ROOT / "docs" / "_hooks" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_cli_page_has_every_command_and_option():
    import argparse

    from llmbench.cli import build_parser

    gen = _hooks()
    parser = build_parser()
    page = gen.cli_markdown(parser)
    subs = gen._subcommands(parser)
    assert {"info", "bench", "membw", "quantize", "dummy", "eval"} <= set(subs)
    for name, (sub, _) in subs.items():
        assert f"## llmbench {name}\n" in page
        for a in sub._actions:
            if isinstance(a, argparse._HelpAction):
                continue
            for flag in a.option_strings:
                assert f"`{flag}" in page, (name, flag)
            if a.help and "%(" not in a.help:
                assert " ".join(a.help.split()).replace("%%", "%").replace("|", "\\|") in page, (name, a.dest)


def test_cli_table_cells():
    import argparse

    gen = _hooks()
    p = argparse.ArgumentParser(prog="x", description="d")
    sub = p.add_subparsers().add_parser("run", help="run it", epilog="example: x run --n 3")
    sub.add_argument("path", help="a file")
    sub.add_argument("--n", type=int, default=2, help="how many (default %(default)s), 5%% or a|b")
    sub.add_argument("--mode", choices=("a", "b"), default="a")
    sub.add_argument("--flag", action="store_true", help="on")
    sub.add_argument("--need", required=True)
    page = gen.cli_markdown(p)
    lines = page.splitlines()
    assert "| `--n N` | `2` | how many (default 2), 5% or a\\|b |" in lines
    assert "| `--mode {a,b}` | `a` |  |" in lines
    assert "| `--flag` |  | on |" in lines
    assert "| `--need NEED` | required |  |" in lines
    assert "| `path` | required | a file |" in lines
    assert page.startswith("## x\n") and "## x run" in lines
    assert "example: x run --n 3" in page


def test_schema_tables_have_every_field():
    gen = _hooks()
    for name in ("result.schema.json", "eval-results.schema.json"):
        schema = json.loads((ROOT / "docs" / name).read_text())
        page = gen.schema_markdown(name)
        paths = {r[0] for r in gen.schema_rows(schema)}

        def walk(node, path):
            for key, child in node.get("properties", {}).items():
                p = f"{path}.{key}" if path else key
                assert p in paths, (name, p)
                assert f"| `{p}` |" in page
                walk(child, p)
            if isinstance(node.get("items"), dict):
                walk(node["items"], f"{path}[]")
            if isinstance(node.get("additionalProperties"), dict):
                walk(node["additionalProperties"], f"{path}.*")

        walk(schema, "")
    rows = {r[0]: r for r in gen.schema_rows(json.loads((ROOT / "docs" / "result.schema.json").read_text()))}
    assert rows["schema_version"][1:3] == ("const 1", True)
    assert rows["commit"][1] == "string or null"


def test_env_page_lists_what_the_code_reads():
    gen = _hooks()
    reads = gen.env_reads()
    for name in ("LLMBENCH_SIMD", "LLMBENCH_PREFETCH", "LLMBENCH_CUDA", "LLMBENCH_CUDA_ARCH", "LLMBENCH_CUDA_LIB",
                 "LLMBENCH_CACHE", "LLMBENCH_DATA", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT", "OPENAI_API_KEY"):
        assert name in reads, name
    assert gen.env_unlisted("no variables here").count("| `") == len(reads)
    assert gen.env_unlisted(" ".join(f"`{k}`" for k in reads)) == ""


def test_table_cell_escapes_pipes_outside_code_only():
    gen = _hooks()
    assert gen._cell("a|b `x|y` c|d\n e") == "a\\|b `x|y` c\\|d e"


def test_doctests_become_fenced_code():
    import importlib.util

    spec = importlib.util.spec_from_file_location("llmbench_griffe_doctest", ROOT / "docs" / "_hooks" / "griffe_doctest.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    text = ("Intro.\n\n    >>> x = f(a)[0]   # doctest: +SKIP\n    ... more\n    42\n\nAfter.\n"
            "```\n>>> inside a fence\n```")
    assert mod.fence_doctests(text) == ("Intro.\n\n    ```pycon\n    >>> x = f(a)[0]\n    ... more\n    42\n    ```\n\n"
                                        "After.\n```\n>>> inside a fence\n```")


def test_site_builds_strict(tmp_path):
    # the whole site, as a reader gets it: a broken link or reference, a page missing from the generated
    # ones, or a docstring the renderer cannot read fails here (and so in CI); no network is needed. Not
    # -q: mkdocs then drops warnings before --strict counts them, and a broken link passes
    r = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                       cwd=ROOT, capture_output=True, text=True, timeout=600,
                       env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert r.returncode == 0, r.stdout + r.stderr
    assert (tmp_path / "site" / "index.html").exists() and (tmp_path / "site" / "cli" / "index.html").exists()
