"""Shared fixtures: paths to the real data and models in ../shared (tests skip when absent)."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = ROOT.parent / "shared"
STORIES = SHARED / "models" / "stories260K" / "stories260K.gguf"


@pytest.fixture(scope="session")
def stories_path() -> Path:
    if not STORIES.exists():
        pytest.skip(f"{STORIES} not found: the real stories260K model lives in ../shared/models")
    return STORIES

