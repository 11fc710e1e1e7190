"""The evaluation runner: tasks' documents to requests, requests to an adapter, answers back to the
tasks, scores to per-sample records and aggregated results.

Documents run a subject at a time, in chunks of up to ``chunk`` documents whose requests go to the
adapter together, so the engine shares their prefixes and batches them. A document's per-sample record
is appended to ``DIR/samples_TASK.jsonl`` (and flushed to the OS) as soon as its last request is
answered (`Adapter.answer`'s ``on_answer``: the engine and the server adapter hand over each generation
as it finishes, while the rest of the chunk decodes), so a killed run loses only the requests in
flight; the file is fsynced at the end of each chunk. ``resume=DIR`` reads those records back (a last
line cut by a kill is dropped and recomputed; a document recorded twice keeps its first record), runs
only the documents not there, and aggregates old and new records as one run would: same final numbers.

A generation that failed for good (a server's every retry: ``Generation.failed``) ends its document
without a record: the document is counted in ``timing["docs_failed"]`` (its error in
``timing["errors"]``, the first few), left out of the metrics, and asked again by ``--resume``.

``DIR/run.json`` holds the run's settings (written first, so an interrupted run can be resumed from
its folder alone) and ``DIR/results.json`` the results (schema: `llmbench.eval.results`).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, cast

from .. import LLMBenchError
from .api import (
    Adapter,
    Answer,
    Doc,
    ForJudge,
    Generation,
    LLAnswer,
    Loglikelihood,
    OnAnswer,
    Request,
    Task,
    request_json,
)
from .metrics import aggregate, mean_stderr, paired_difference_ci
from .results import TaskResult

SAMPLES = "samples_{}.jsonl"
MAX_ERRORS = 5          # failed documents' errors kept in results.json (all are counted)


def read_samples(path: Path) -> list[dict[str, Any]]:
    """Records of a samples file; a last line without its newline (cut by a kill) is dropped, and the
    file truncated to the whole lines before it so appending goes on cleanly."""
    if not path.exists():
        return []
    raw = path.read_bytes()
    keep = raw[: raw.rfind(b"\n") + 1]
    if len(keep) != len(raw):
        with open(path, "r+b") as f:
            f.truncate(len(keep))
    out = []
    for i, line in enumerate(keep.splitlines(), 1):
        if not line.strip():
            continue
        try:
            out.append(json.loads(line))
        except ValueError as e:
            raise LLMBenchError(f"{path}:{i}: not a JSON record ({e}); remove the line or the file to "
                                "recompute it") from e
    return out


def _record(task: Task, doc: Doc, reqs, answers, scored, precision: str) -> dict[str, Any]:
    prompt = task.prompt(doc)
    rq = []
    for r in reqs:
        d = request_json(r)
        if d.get("context") == prompt:   # the prompt is stored once per record, not once per request
            del d["context"]
        rq.append(d)
    return {"task": task.name, "subject": doc.subject, "doc_id": doc.id, "prompt": prompt, "requests": rq,
            "answers": [task.answer_record(a) for a in answers], "target": scored.target, "pred": scored.pred,
            "metrics": scored.metrics, "precision": precision, **scored.extra}


def _chunks(docs: list[Doc], size: int, by_subject: bool = True) -> list[list[Doc]]:
    out: list[list[Doc]] = []
    for d in docs:
        if out and (out[-1][0].subject == d.subject or not by_subject) and len(out[-1]) < size:
            out[-1].append(d)
        else:
            out.append([d])
    return out


def answer_all(reqs: Sequence[Request], adapter: Adapter, judge: Adapter | None, task: str,
               on_answer: OnAnswer | None = None) -> list[Answer]:
    """Answers in order: `ForJudge` requests by ``judge``, the rest by ``adapter``; ``on_answer(i, a)``
    as each is answered."""
    mine = [i for i, r in enumerate(reqs) if not isinstance(r, ForJudge)]
    judged = [i for i, r in enumerate(reqs) if isinstance(r, ForJudge)]
    out: list[Answer | None] = [None] * len(reqs)
    if judged and judge is None:
        raise LLMBenchError(f"{task} is graded by a judge model: name one with --judge (a GGUF file, or NAME@URL of "
                            "an OpenAI-compatible server), or judge=... in llmbench.evaluate")
    for idx, who, rs in ((mine, adapter, [reqs[i] for i in mine]),
                         (judged, judge, [reqs[i].request for i in judged])):  # type: ignore[union-attr]
        if idx:
            cb = None if on_answer is None else (lambda j, a, idx=idx: on_answer(idx[j], a))
            for i, a in zip(idx, who.answer(rs, on_answer=cb)):  # type: ignore[union-attr]
                out[i] = a
    return out  # type: ignore[return-value]


def run_task(task: Task, adapter: Adapter, out_dir: Path | None, *, chunk: int = 256, resume: bool = False,
             on_docs: Callable[[int], None] | None = None, judge: Adapter | None = None) -> TaskResult:
    """Run one task; records go to ``out_dir`` (when given) as each document finishes. A chunk's
    documents go round by round (`Task.followup`) until none asks for more; ``judge`` answers
    `ForJudge` requests."""
    docs = task.docs()
    path = out_dir / SAMPLES.format(task.name) if out_dir else None
    old: dict[tuple[str, int], dict[str, Any]] = {}
    if path is not None and resume:
        wanted = {(d.subject, d.id) for d in docs}
        for r in read_samples(path):
            if (r.get("subject"), r.get("doc_id")) in wanted:
                old.setdefault((r["subject"], r["doc_id"]), r)   # recorded twice: the first one stands
    elif path is not None and path.exists():
        path.unlink()
    todo = [d for d in docs if (d.subject, d.id) not in old]
    if on_docs and old:
        on_docs(len(old))
    new: dict[tuple[str, int], dict[str, Any]] = {}
    errors: dict[tuple[str, int], str] = {}
    t0 = time.perf_counter()
    with open(path, "a", encoding="utf-8") if path is not None else contextlib.nullcontext() as f:
        for group in _chunks(todo, chunk, task.chunk_by_subject):
            per_doc = [list(task.requests(d)) for d in group]
            got: list[list[Answer]] = [[] for _ in group]
            pending = [list(rs) for rs in per_doc]

            def finish(i: int, d: Doc, answers: list[Answer]) -> list[Request]:
                """A document's round is answered: its next round's requests, or [] once it is done
                (recorded, or failed)."""
                got[i] += answers
                bad = [a.error or "failed" for a in answers if isinstance(a, Generation) and a.failed]
                more = [] if bad else list(task.followup(d, got[i]))
                if bad:
                    errors[(d.subject, d.id)] = bad[0]
                elif more:
                    per_doc[i] += more
                    return more
                else:
                    rec = _record(task, d, per_doc[i], got[i], task.score(d, got[i]), adapter.precision)
                    new[(d.subject, d.id)] = rec
                    if f is not None:
                        f.write(json.dumps(rec, ensure_ascii=False) + "\n")
                        f.flush()
                if on_docs:
                    on_docs(1)
                return []

            for i, d in enumerate(group):
                if not pending[i]:                  # a document that asks nothing is done at once
                    finish(i, d, [])
            while any(pending):
                flat = [r for rs in pending for r in rs]
                owner = [(i, j) for i, rs in enumerate(pending) for j in range(len(rs))]
                answers: list[list[Answer | None]] = [[None] * len(rs) for rs in pending]
                left = [len(rs) for rs in pending]
                nxt: list[list[Request]] = [[] for _ in group]

                def on_answer(k: int, a: Answer) -> None:
                    i, j = owner[k]
                    answers[i][j] = a
                    left[i] -= 1
                    if left[i] == 0:
                        nxt[i] = finish(i, group[i], answers[i])  # type: ignore[arg-type]

                answer_all(flat, adapter, judge, task.name, on_answer)
                pending = nxt
            if f is not None:
                os.fsync(f.fileno())
    wall = time.perf_counter() - t0
    records = [kept for d in docs if (kept := old.get((d.subject, d.id)) or new.get((d.subject, d.id))) is not None]
    agg = aggregate(records, list(task.metrics), task.groups(), task.name, task.mean_metrics)
    timing = {"wall_s": wall, "docs_computed": len(new), "docs_resumed": len(old),
              "docs_per_s": len(new) / wall if wall > 0 and new else None,
              "docs_failed": len(errors), "errors": [f"{s or task.name} #{i}: {e}" for (s, i), e in errors.items()][:MAX_ERRORS],
              "requests": sum(len(r["requests"]) for r in records)}
    return TaskResult(task.name, task.version, task.settings(), agg, records, timing, task.extra_results(records))


def precision_check(task: Task, records: Sequence[dict[str, Any]], reference: Adapter, n: int,
                    seed: int = 0) -> dict[str, Any] | None:
    """Re-score ``n`` random documents of a log-likelihood task with ``reference`` (the engine with f32
    activations) and compare with the records: how often the chosen answer flips, how accuracy moves
    (paired, with its standard error and a 95% interval: metrics.paired_difference_ci), how far log-likelihoods
    move."""
    docs = task.docs()
    if not docs or not isinstance(task.requests(docs[0])[0], Loglikelihood):
        return None
    by_key = {(r["subject"], r["doc_id"]): r for r in records}
    pick = [docs[i] for i in sorted(random.Random(seed).sample(range(len(docs)), min(n, len(docs))))]
    per_doc = [task.requests(d) for d in pick]
    answers = reference.answer([r for rs in per_doc for r in rs])
    flips, deltas, diffs = 0, [], []
    k = 0
    for d, rs in zip(pick, per_doc):
        ans = answers[k: k + len(rs)]
        k += len(rs)
        ref = task.score(d, ans)
        rec = by_key[(d.subject, d.id)]
        flips += ref.pred != rec["pred"]
        deltas.append(ref.metrics["acc"] - rec["metrics"]["acc"])
        # a log-likelihood task (checked above): every answer is an LLAnswer
        diffs += [abs(cast(LLAnswer, a).logprob - b["logprob"]) for a, b in zip(ans, rec["answers"])]
    m = len(pick)
    d_mean = sum(deltas) / m
    se = mean_stderr(deltas) or 0.0
    gained, lost = sum(1 for x in deltas if x > 0), sum(1 for x in deltas if x < 0)
    ci = paired_difference_ci(gained, lost, m)
    assert ci is not None   # m >= 1
    return {"docs": m, "reference": reference.precision, "flip_rate": flips / m, "flips": flips,
            "acc_change": d_mean, "acc_change_stderr": se,
            "acc_change_ci95": list(ci),
            "max_abs_logprob_diff": max(diffs), "mean_abs_logprob_diff": sum(diffs) / len(diffs)}
