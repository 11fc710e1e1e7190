"""Every notebook in notebooks/ runs top to bottom against the installed package (code cells are
executed in order in one namespace, from the notebooks/ folder, as Jupyter would)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=[p.name for p in NOTEBOOKS])
def test_notebook_runs(path, stories_path, monkeypatch):
    nb = json.loads(path.read_text())
    assert nb["nbformat"] == 4
    monkeypatch.chdir(path.parent)
    ns: dict = {"__name__": "__notebook__"}
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        exec(compile(src, f"{path.name}[cell {i}]", "exec"), ns)  # noqa: S102 - our own notebooks


def test_there_are_notebooks():
    assert NOTEBOOKS, "notebooks/ should hold at least one notebook"
    assert all(os.path.getsize(p) < 200_000 for p in NOTEBOOKS), "commit notebooks without large outputs"
