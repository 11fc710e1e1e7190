"""Benchmark prompts from a dataset file: JSON lines (or one JSON array) of prompts or conversations.

Each record gives one prompt (the first user turn of a conversation) and, where the record has one,
the reference reply. Recognised shapes, as the common public sets write them:

- ``{"prompt": "..."}``, ``{"text": "..."}``, ``{"question": "..."}`` (GSM8K), ``{"instruction": "..."}``
- ``{"turns": ["...", ...]}`` (MT-Bench questions)
- ``{"conversations": [{"from": "human", "value": "..."}, {"from": "gpt", "value": "..."}]}`` (ShareGPT)
- ``{"messages": [{"role": "user", "content": "..."}, ...]}`` (OpenAI chat)

A record of another shape, a line that is not JSON, or a file with no prompt raises ValueError
naming the file and line, so a wrong file is caught before any model is loaded.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass

import numpy as np

_TEXT_KEYS = ("prompt", "text", "question", "instruction", "input")
_USER = ("human", "user")
_ASSISTANT = ("gpt", "assistant", "chatgpt", "bard", "model")


@dataclass
class DatasetPrompt:
    """One prompt of a dataset, with its reference reply where the dataset has one."""

    text: str
    reply: str | None = None   # the dataset's reference reply, if it has one


def _from_turns(turns: list, where: str) -> DatasetPrompt:
    prompt = reply = None
    for t in turns:
        if not isinstance(t, dict):
            raise ValueError(f"{where}: a conversation turn is {type(t).__name__}, expected an object")
        who = str(t.get("from", t.get("role", ""))).lower()
        text = t.get("value", t.get("content"))
        if not isinstance(text, str):
            continue
        if prompt is None and who in _USER:
            prompt = text
        elif prompt is not None and who in _ASSISTANT:
            reply = text
            break
    if prompt is None:
        raise ValueError(f"{where}: the conversation has no user turn ('from': 'human' or 'role': 'user')")
    return DatasetPrompt(prompt, reply)


def _record(obj, where: str) -> DatasetPrompt | None:
    if isinstance(obj, str):
        return DatasetPrompt(obj)
    if not isinstance(obj, dict):
        raise ValueError(f"{where}: expected an object or a string, got {type(obj).__name__}")
    for key in ("conversations", "conversation", "messages"):
        if isinstance(obj.get(key), list):
            return _from_turns(obj[key], where)
    if isinstance(obj.get("turns"), list) and obj["turns"] and isinstance(obj["turns"][0], str):
        return DatasetPrompt(obj["turns"][0])
    for key in _TEXT_KEYS:
        if isinstance(obj.get(key), str):
            reply = next((obj[k] for k in ("answer", "response", "output", "completion") if isinstance(obj.get(k), str)),
                         None)
            return DatasetPrompt(obj[key], reply)
    raise ValueError(f"{where}: no prompt found; expected one of the keys {', '.join(_TEXT_KEYS)}, "
                     "'turns', 'conversations' or 'messages'")


def load_prompts(path: str | os.PathLike[str]) -> list[DatasetPrompt]:
    """Every prompt of a JSONL file (or a JSON array file, as ShareGPT ships), in file order."""
    path = os.fspath(path)
    with open(path, encoding="utf-8") as f:
        head = f.read(1 << 16).lstrip()
        f.seek(0)
        out: list[DatasetPrompt] = []
        if head.startswith("["):
            try:
                records = json.load(f)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}: not valid JSON ({e})") from None
            items = [(f"{path}: item {i}", r) for i, r in enumerate(records)]
        else:
            items = []
            for lineno, line in enumerate(f, 1):
                if not line.strip():
                    continue
                try:
                    items.append((f"{path}:{lineno}", json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{lineno}: not a JSON line ({e.msg})") from None
    for where, obj in items:
        p = _record(obj, where)
        if p is not None and p.text.strip():
            out.append(p)
    if not out:
        raise ValueError(f"{path}: no prompts in the file")
    return out


def sample(prompts: list[DatasetPrompt], n: int, rng: np.random.Generator) -> list[DatasetPrompt]:
    """``n`` prompts drawn without replacement (with replacement if the file has fewer than n)."""
    idx = rng.choice(len(prompts), size=n, replace=len(prompts) < n)
    return [prompts[int(i)] for i in idx]
