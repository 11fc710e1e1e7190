"""mypy over the package with the settings in pyproject.toml ([tool.mypy]; mypy and the stub packages are
pinned in requirements-test.txt). A finding fails the suite with mypy's report, so type errors never
accumulate. The C extension's stub, llmbench/_core.pyi, is checked against the built module here too."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import llmbench._core as core

ROOT = Path(__file__).resolve().parents[1]


def test_mypy_finds_nothing(tmp_path):
    # a fresh cache each run: a cache left by another checkout or mypy version cannot hide a finding
    r = subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "--no-error-summary"],
                       cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout + r.stderr


def test_core_stub_classes_match_the_extension():
    """Each class llmbench/_core.pyi declares exists in the built extension with the same bases, so the
    except clauses mypy checks against the stub are the ones that run."""
    tree = ast.parse((ROOT / "llmbench" / "_core.pyi").read_text())
    classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
    assert classes, "the stub declares no class"
    for c in classes:
        real = getattr(core, c.name, None)
        assert isinstance(real, type), f"_core.pyi declares {c.name}, which llmbench._core does not define"
        assert [b.__name__ for b in real.__bases__] == [ast.unparse(b) for b in c.bases], c.name
    # and every exception class the extension defines is declared
    exceptions = {n for n, v in vars(core).items() if isinstance(v, type) and issubclass(v, BaseException)}
    assert exceptions == {c.name for c in classes}
