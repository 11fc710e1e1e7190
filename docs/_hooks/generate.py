"""MkDocs hooks: pages generated from the code at build time, so they cannot drift from it.

    <!-- llmbench:cli -->                     every command of `llmbench`, from cli.build_parser()
    <!-- llmbench:schema FILE.schema.json --> a JSON schema in docs/ as a table of fields
    <!-- llmbench:env-unlisted -->            environment variables the code reads that the page omits

A marker is replaced in the page's markdown (on_page_markdown). Nothing here reaches the network.
Tested by tests/test_docs.py (every argparse option and every schema field appears).
"""

from __future__ import annotations

import argparse
import json
import os
import re
from pathlib import Path
from typing import Any

DOCS = Path(__file__).resolve().parent.parent
ROOT = DOCS.parent
CLI_MARKER = "<!-- llmbench:cli -->"
SCHEMA_MARKER = re.compile(r"<!-- llmbench:schema ([\w.-]+\.json) -->")
ENV_MARKER = "<!-- llmbench:env-unlisted -->"
# os.environ.get("X"), os.environ["X"], environ.setdefault("X", ...), getenv("X"), ${X:-...} in shell
ENV_READ = re.compile(r"""(?:environ(?:\.get|\.setdefault)?\(?\[?|getenv\()\s*["']([A-Z][A-Z0-9_]+)["']"""
                      r"|\$\{([A-Z][A-Z0-9_]+):-")
ENV_SOURCES = ("llmbench/**/*.py", "llmbench/*.c", "csrc/*.c", "kernels/*.cu", "setup.py", "benchmarks/*.py",
               "benchmarks/*.sh")


def _cell(text: Any) -> str:
    """Text for a markdown table cell: one line, pipes escaped outside code spans (a pipe inside one does
    not split the cell, and an escape there would show)."""
    parts = re.split(r"(`+ ?.*? ?`+)", " ".join(str(text).split()))
    return "".join(p if p.startswith("`") else p.replace("|", "\\|") for p in parts)


def _code(text: Any) -> str:
    """Inline code that survives backticks inside it."""
    s = str(text)
    fence = "``" if "`" in s else "`"
    pad = " " if fence == "``" else ""
    return f"{fence}{pad}{s}{pad}{fence}"   # a pipe inside a code span does not split a table cell


# ---- the CLI ----

def _subcommands(parser: argparse.ArgumentParser) -> dict[str, tuple[argparse.ArgumentParser, str]]:
    """name -> (parser, one-line help) for each subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            return {name: (p, helps.get(name, "")) for name, p in action.choices.items()}
    return {}


def _default(action: argparse.Action) -> str:
    if action.required:
        return "required"
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction, argparse._HelpAction)):
        return ""
    if action.default is None or action.default == argparse.SUPPRESS:
        return ""
    return _code(action.default)


def _options_table(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = ["| option | default | description |", "| --- | --- | --- |"]
    for a in parser._actions:
        if isinstance(a, (argparse._HelpAction, argparse._SubParsersAction)):
            continue
        if a.option_strings:
            metavar = formatter._format_args(a, a.dest.upper()) if a.nargs != 0 else ""
            name = ", ".join(_code(f"{o} {metavar}".strip()) for o in a.option_strings)
        else:
            name = _code(formatter._metavar_formatter(a, a.dest)(1)[0])
        text = formatter._expand_help(a) if a.help else ""   # choices show in the option's name
        lines.append(f"| {name} | {_default(a)} | {_cell(text)} |")
    return lines if len(lines) > 2 else []


def cli_markdown(parser: argparse.ArgumentParser | None = None) -> str:
    """Markdown for every command of ``parser`` (default: llmbench's): usage, description, options,
    examples; the top-level options first."""
    if parser is None:
        from llmbench.cli import build_parser

        parser = build_parser()
    columns = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"   # argparse wraps usage lines to the terminal: the same page on any machine
    try:
        out = [f"## {parser.prog}", "", parser.description or "", "", "```text", parser.format_usage().strip(), "```",
               ""]
        out += _options_table(parser) + [""]
        if parser.epilog:
            out += [_cell(parser.epilog), ""]
        for name, (sub, short) in _subcommands(parser).items():
            out += [f"## {parser.prog} {name}", "", f"*{_cell(short)}*" if short else "", "",
                    "```text", sub.format_usage().strip(), "```", "", sub.description or "", ""]
            out += _options_table(sub) + [""]
            if sub.epilog:
                out += ["```text", sub.epilog.strip(), "```", ""]
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return "\n".join(out)


# ---- JSON schemas ----

def _type(node: dict) -> str:
    if "const" in node:
        return f"const {json.dumps(node['const'])}"
    if "enum" in node:
        return "one of " + ", ".join(json.dumps(v) for v in node["enum"])
    alts = node.get("oneOf") or node.get("anyOf")
    if alts and "type" not in node:
        return " or ".join(_type(a) for a in alts)
    t = node.get("type", "any")
    types = t if isinstance(t, list) else [t]
    if "array" in types and isinstance(node.get("items"), dict):
        types = [f"array of {_type(node['items'])}" if x == "array" else x for x in types]
    return " or ".join(types)


def _constraints(node: dict) -> str:
    parts = []
    for key, word in (("minimum", ">="), ("exclusiveMinimum", ">"), ("maximum", "<="), ("minItems", "items >="),
                      ("minLength", "length >="), ("minProperties", "keys >=")):
        if key in node:
            parts.append(f"{word} {node[key]}")
    if "pattern" in node:
        parts.append(f"pattern {_code(node['pattern'])}")
    if "format" in node:
        parts.append(f"format {node['format']}")
    return "; ".join(parts)


def schema_rows(node: dict, path: str = "", required: bool = True) -> list[tuple[str, str, bool, str]]:
    """(field path, type, required, description) for ``node`` and everything inside it, depth first.
    Objects nest as ``a.b``, array items as ``a[]``, free keys as ``a.*`` or ``a.<pattern>``."""
    rows: list[tuple[str, str, bool, str]] = []
    if path:
        desc = node.get("description", "")
        extra = _constraints(node)
        rows.append((path, _type(node), required, f"{desc} ({extra})" if desc and extra else desc or extra))
    req = set(node.get("required", []))
    for key, child in node.get("properties", {}).items():
        rows += schema_rows(child, f"{path}.{key}" if path else key, key in req)
    for pattern, child in node.get("patternProperties", {}).items():
        rows += schema_rows(child, f"{path}.<{pattern}>", False)
    extra = node.get("additionalProperties")
    if isinstance(extra, dict) and extra:
        rows += schema_rows(extra, f"{path}.*", False)
    items = node.get("items")
    if isinstance(items, dict) and (items.get("properties") or items.get("items")):
        rows += [r for r in schema_rows(items, f"{path}[]", True) if r[0] != f"{path}[]"]
    for alt in node.get("oneOf", []) + ([] if not path else node.get("anyOf", [])):
        if alt.get("properties"):
            rows += schema_rows(alt, path, required)[1:]
    return rows


def schema_markdown(name: str) -> str:
    """A schema file of docs/ as its title, description, top-level rules and a table of fields."""
    schema = json.loads((DOCS / name).read_text(encoding="utf-8"))
    out = [f"**{_cell(schema.get('title', name))}** ([`{name}`]({name})). {schema.get('description', '')}", ""]
    alts = schema.get("anyOf") or []
    if alts and all(set(a) == {"required"} for a in alts):
        keys = ", ".join(_code(k) for a in alts for k in a["required"])
        out += [f"A result holds at least one of {keys}.", ""]
    if schema.get("additionalProperties") is False:
        out += ["No top-level keys other than these are allowed.", ""]
    out += ["| field | type | required | description |", "| --- | --- | --- | --- |"]
    for path, typ, req, desc in schema_rows(schema):
        out.append(f"| {_code(path)} | {_cell(typ)} | {'yes' if req else ''} | {_cell(desc)} |")
    return "\n".join(out) + "\n"


# ---- environment variables ----

def env_reads(root: Path = ROOT) -> dict[str, str]:
    """Every environment variable the package, the core, setup.py and the benchmarks read by name ->
    the first place (path:line) that reads it."""
    found: dict[str, str] = {}
    for pattern in ENV_SOURCES:
        for path in sorted(root.glob(pattern)):
            for i, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
                for m in ENV_READ.finditer(line):
                    found.setdefault(m.group(1) or m.group(2), f"{path.relative_to(root)}:{i}")
    return found


def env_unlisted(page: str) -> str:
    """Markdown naming the variables the code reads that ``page`` does not mention (empty when none):
    a new variable shows up on the site the day it is added, with where it is read."""
    missing = {k: v for k, v in env_reads().items() if f"`{k}`" not in page}
    if not missing:
        return ""
    rows = "\n".join(f"| `{k}` | read at `{v}`; not described here yet |" for k, v in sorted(missing.items()))
    return f"## Also read by the code\n\n| variable | where |\n| --- | --- |\n{rows}\n"


# ---- the hook ----

def on_page_markdown(markdown: str, page: Any, config: Any, files: Any) -> str:
    if CLI_MARKER in markdown:
        markdown = markdown.replace(CLI_MARKER, cli_markdown())
    if ENV_MARKER in markdown:
        markdown = markdown.replace(ENV_MARKER, env_unlisted(markdown))
    return SCHEMA_MARKER.sub(lambda m: schema_markdown(m.group(1)), markdown)
