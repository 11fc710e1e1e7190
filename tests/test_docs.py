"""The version's one source, and the documentation pages generated from the code (docs/_hooks/generate.py):
every option of every command and every field of the result schemas must appear. The site itself is
built with `mkdocs build --strict` by .ci/run."""

from __future__ import annotations

import json
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
