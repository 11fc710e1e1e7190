"""Griffe extension for the API pages: interactive examples in docstrings (``>>>`` lines, their ``...``
continuations and the output below them) become fenced ``pycon`` blocks, so Markdown renders them as code
instead of reading ``x[0]`` as a link; ``# doctest: +SKIP`` flags are dropped. Tested by tests/test_docs.py.
"""

from __future__ import annotations

import re
from typing import Any

import griffe

FLAGS = re.compile(r"\s*#\s*doctest:.*$")


def fence_doctests(text: str) -> str:
    """``text`` with every run of doctest lines wrapped in a fenced block (runs already inside a fence are
    left alone). A run starts at a ``>>>`` line and ends at a blank line or at less indentation."""
    out: list[str] = []
    lines = text.splitlines()
    i, in_fence = 0, False
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if stripped.startswith(("```", "~~~")):
            in_fence = not in_fence
        if in_fence or not stripped.startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        block = []
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            block.append(FLAGS.sub("", lines[i][len(indent):]))
            i += 1
        out += [f"{indent}```pycon", *(f"{indent}{b}" for b in block), f"{indent}```"]
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None and ">>>" in obj.docstring.value:
            obj.docstring.value = fence_doctests(obj.docstring.value)
