"""Where evaluation data lives, and readers for the formats it comes in.

A data set named ``mmlu`` is looked for in the ``data_dir`` argument (``--data-dir``) when it is given,
and only there; otherwise in ``$LLMBENCH_DATA``, then ``../shared/data`` beside the current directory
and beside this checkout.
Each holds one folder per set, in its original layout (MMLU's CSV files, C-Eval's and CMMLU's CSV
with a header, GSM8K's JSON lines) or in the Hugging Face layout (``cais/mmlu``'s parquet files).
Nothing is downloaded: a missing set raises `DataNotFoundError` saying where it looked and how to
get the data.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any, cast

from .. import LLMBenchError

_CHECKOUT = Path(__file__).resolve().parents[2]

# How to get each set, for the error message.
SOURCES = {
    "mmlu": "the authors' CSV release (data/dev, data/test: https://people.eecs.berkeley.edu/~hendrycks/data.tar) "
            "or the Hugging Face set cais/mmlu (parquet, one folder per subject)",
    "ceval": "the official ceval-exam release (dev/, val/, test/ CSV files and subject_mapping.json), "
             "Hugging Face set ceval/ceval-exam",
    "cmmlu": "the CMMLU release (dev/, test/ CSV files), Hugging Face set haonan-li/cmmlu",
    "gsm8k": "openai/grade-school-math's test.jsonl, or the Hugging Face set openai/gsm8k",
    "wikitext2": "WikiText-2 raw test split as one text file (wikitext-2-raw-test.txt)",
}


class DataNotFoundError(LLMBenchError, FileNotFoundError):
    """An evaluation data set is not where llmbench looked."""


def search_roots(data_dir: str | os.PathLike[str] | None = None) -> list[Path]:
    """Where evaluation data is looked for, in order: ``data_dir`` alone when given, else $LLMBENCH_DATA,
    then shared/data beside the working directory and beside the checkout (duplicates dropped).
    """
    if data_dir is not None:
        return [Path(data_dir)]
    roots: list[Path] = []
    if os.environ.get("LLMBENCH_DATA"):
        roots.append(Path(os.environ["LLMBENCH_DATA"]))
    roots += [Path.cwd().parent / "shared" / "data", _CHECKOUT.parent / "shared" / "data"]
    seen, out = set(), []
    for r in roots:
        k = r.resolve()
        if k not in seen:
            seen.add(k)
            out.append(r)
    return out


def find(name: str, data_dir: str | os.PathLike[str] | None = None) -> Path:
    """The folder of data set ``name``; ``data_dir`` may also be that folder itself."""
    if data_dir is not None and Path(data_dir).name == name and Path(data_dir).is_dir():
        return Path(data_dir)
    roots = search_roots(data_dir)
    for r in roots:
        if (r / name).is_dir():
            return r / name
    looked = ", ".join(str(r / name) for r in roots)
    raise DataNotFoundError(
        f"{name}: data not found (looked in {looked}). Get {SOURCES.get(name, 'the data set')}, put it in a "
        f"folder named {name}/, and pass its parent with --data-dir DIR (or set LLMBENCH_DATA=DIR)")


def read_csv(path: Path, header: bool) -> list[dict[str, str]] | list[list[str]]:
    """Rows of a CSV file (UTF-8, a byte-order mark dropped): dicts when it has a header."""
    with open(path, encoding="utf-8-sig", newline="") as f:
        if header:
            return list(csv.DictReader(f))
        return [row for row in csv.reader(f) if row]


def read_jsonl(path: Path) -> list[tuple[int, Any]]:
    """(line number, value) of every non-blank line of a JSON Lines file; a line that is not JSON is an
    LLMBenchError naming the file and line."""
    rows = []
    with open(path, encoding="utf-8") as f:
        for i, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append((i, json.loads(line)))
            except ValueError as e:
                raise LLMBenchError(f"{path}:{i}: not a JSON line ({e})") from e
    return rows


def read_parquet(path: Path) -> list[dict[str, Any]]:
    """A parquet file's rows as dicts.

    Raises:
        LLMBenchError: pandas (or pyarrow) is not installed.
    """
    try:
        import pandas as pd
    except ImportError as e:
        raise LLMBenchError(f"{path}: reading parquet needs pandas and pyarrow (pip install pandas pyarrow)") from e
    return cast("list[dict[str, Any]]", pd.read_parquet(path).to_dict("records"))   # parquet's column names are strings
