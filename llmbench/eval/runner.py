"""The evaluation runner: tasks' documents to requests, requests to an adapter, answers back to the
tasks, scores to per-sample records and aggregated results.

Documents run a subject at a time, in chunks of up to ``chunk`` documents whose requests go to the
adapter together, so the engine shares their prefixes and batches them. A document's per-sample record
is appended to ``DIR/samples_TASK.jsonl`` (and flushed to the OS) as soon as its last request is
answered (`Adapter.answer`'s ``on_answer``: the engine and the server adapter hand over each generation
as it finishes, while the rest of the chunk decodes), so a killed run loses only the requests in
flight (a document still waiting for some of its requests keeps the finished ones in pieces, below);
the file is fsynced at the end of each chunk. ``resume=DIR`` reads those records back (a last
line cut by a kill is dropped and recomputed; a document recorded twice keeps its first record), runs
only the documents not there, and aggregates old and new records as one run would: same final numbers.

A task that asks in rounds (`Task.followup`: MT-Bench's turn 1, turn 2, then the judge) has each round
that another follows recorded as it is answered, before the next round's requests go out: a *partial*
record appended (and flushed) to ``DIR/partial_TASK.jsonl`` with ``task``, ``subject``, ``doc_id``,
``round`` (1, 2, ...), the round's ``requests`` (`request_json`) and ``answers`` (`answer_json`, read
back by `answer_from_json`). The last round has none: the document's record holds it all. A round of
several requests (MT-Bench's two judgments, HumanEval's samples) that an adapter answers one by one
also has each answer that finishes while others of the round are still out (or beside one that
failed) appended as a *piece*: the same fields with ``index``, the positions of ``answers`` in the
round's ``requests``. A one-round task whose documents ask one request each writes no partial file.
``resume`` reloads a document's partial records when it has no record: round k is taken where its
requests equal what the task asks now after rounds 1..k-1 (a round recorded twice: the last one
stands), and the document goes on from the next round, so a run killed in MT-Bench's judge round asks
the judge only, and its answers are the ones an uninterrupted run scores. A recorded
round that no longer matches (other data, another task version) is recomputed, from there on, with a
note in ``timing["notes"]``; ``timing["rounds_resumed"]`` and ``timing["rounds_recomputed"]`` count
them (present where partial records were found). Pieces of the round a document goes on from, where
their requests equal that round's, give their answers (``timing["answers_resumed"]`` counts them) and
only the rest is asked. As FastChat keeps model answers apart from judgments, the partial file
outlives the run: its answers are what a judge sees. ``rejudge`` (``--resume DIR
--rejudge --judge OTHER``) drops the records of documents a judge graded, and the pieces of rounds
that ask the judge (the old judge's, from the partial file too), and reuses their rounds up to the
first one that asks the judge: the same answers graded again, the model asked nothing (and, where
`unrecorded_answers` finds every answer recorded, not even loaded: llmbench.eval.recorded).

A generation that failed for good (a server's every retry: ``Generation.failed``) ends its document
without a record: the document is counted in ``timing["docs_failed"]`` (its error in
``timing["errors"]``, the first few), left out of the metrics, and asked again by ``--resume``; the
rounds before the failed one stay in the partial file, and the round's other answers in pieces, so a
judge failing for good costs only the failed judgments on resume, never the model's answers.

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
from dataclasses import dataclass
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
    answer_from_json,
    answer_json,
    request_json,
)
from .metrics import aggregate, mean_stderr, paired_difference_ci
from .results import TaskResult

SAMPLES = "samples_{}.jsonl"
PARTIAL = "partial_{}.jsonl"
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


def _partial(task: Task, doc: Doc, rnd: int, reqs: Sequence[Request], answers: Sequence[Answer],
             index: Sequence[int] | None = None) -> dict[str, Any]:
    """A round's partial record; with ``index``, a piece of it: the answers to those of ``reqs`` only."""
    out = {"task": task.name, "subject": doc.subject, "doc_id": doc.id, "round": rnd,
           "requests": [request_json(r) for r in reqs], "answers": [answer_json(a) for a in answers]}
    if index is not None:
        out["index"] = list(index)
    return out


def _asks_judge(record: dict[str, Any]) -> bool:
    return any(isinstance(q, dict) and q.get("kind") == ForJudge.kind for q in record.get("requests") or ())


def _as_read(x: Any) -> Any:
    """``x`` as it reads back from a JSON line (tuples become lists)."""
    return json.loads(json.dumps(x, ensure_ascii=False))


def resumed_rounds(task: Task, doc: Doc, recorded: dict[int, dict[str, Any]], rejudge: bool = False
                   ) -> tuple[list[Request], list[Answer], list[Request], int, str | None]:
    """A document's recorded rounds (partial records by round number, from 1) that still hold: round k
    counts only where its requests equal what the task asks now after the answers of rounds 1..k-1 (same
    settings, same data), and with ``rejudge`` only before the first round that asks the judge. Returns
    (their requests, their answers, the next round's requests, how many rounds were taken, why the first
    recorded round that did not hold was dropped, or None)."""
    reqs: list[Request] = []
    got: list[Answer] = []
    asks = list(task.requests(doc))
    k = 1
    while k in recorded and asks and not (rejudge and any(isinstance(r, ForJudge) for r in asks)):
        rec = recorded[k]
        if rec.get("requests") != [_as_read(request_json(r)) for r in asks]:
            return reqs, got, asks, k - 1, f"round {k}'s recorded requests differ from what the task asks now"
        try:
            answers = [answer_from_json(a) for a in rec.get("answers") or ()]
        except LLMBenchError as e:
            return reqs, got, asks, k - 1, f"round {k}: {e}"
        if len(answers) != len(asks) or any(isinstance(a, Generation) and a.failed for a in answers):
            return reqs, got, asks, k - 1, f"round {k}: {len(answers)} answers to {len(asks)} requests"
        reqs += asks
        got += answers
        asks = list(task.followup(doc, got))
        k += 1
    return reqs, got, asks, k - 1, None


@dataclass
class _Run:
    """What DIR holds of a task (`_read_run`)."""

    old: dict[tuple[str, int], dict[str, Any]]                     # records kept, by (subject, doc_id)
    rounds: dict[tuple[str, int], dict[int, dict[str, Any]]]       # whole rounds of documents without one
    pieces: dict[tuple[str, int], dict[int, list[dict[str, Any]]]]  # parts of rounds, by round, in file order
    kept: list[dict[str, Any]]                 # the samples file's records, those a rejudge drops left out
    partial_kept: list[dict[str, Any]] | None  # with rejudge: the partial file less its judgments' pieces


def _read_run(task: Task, docs: Sequence[Doc], out_dir: Path, rejudge: bool) -> _Run:
    """What DIR holds of ``task``: the records kept, by (subject, doc_id) of ``docs`` (with ``rejudge``,
    those a judge graded are left out); the partial records of the documents without one, by round
    (whole rounds; pieces of rounds apart, those of a judge's round left out with ``rejudge``: they are
    the old judge's); and the records each file keeps (what they hold once rejudging drops the rest)."""
    wanted = {(d.subject, d.id) for d in docs}
    old: dict[tuple[str, int], dict[str, Any]] = {}
    kept = []
    for r in read_samples(out_dir / SAMPLES.format(task.name)):
        if rejudge and _asks_judge(r):
            continue                                          # graded again
        kept.append(r)
        if (r.get("subject"), r.get("doc_id")) in wanted:
            old.setdefault((r["subject"], r["doc_id"]), r)   # recorded twice: the first one stands
    rounds: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    pieces: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = {}
    partial_kept: list[dict[str, Any]] | None = [] if rejudge else None
    for r in read_samples(out_dir / PARTIAL.format(task.name)):
        piece = "index" in r
        if rejudge and piece and _asks_judge(r):
            continue                                          # the old judge's judgments
        if partial_kept is not None:
            partial_kept.append(r)
        key = (r.get("subject"), r.get("doc_id"))
        if key in wanted and key not in old and isinstance(r.get("round"), int):
            if piece:
                pieces.setdefault(key, {}).setdefault(r["round"], []).append(r)
            else:
                rounds.setdefault(key, {})[r["round"]] = r     # a round recomputed: the last one stands
    return _Run(old, rounds, pieces, kept, partial_kept)


def answered_in_round(asks: Sequence[Request], pieces: Sequence[dict[str, Any]]) -> dict[int, Answer]:
    """The answers to some of a round's requests ``asks`` that pieces of it (partial records with
    ``index``) hold, by request index: from pieces whose requests equal ``asks``; a failed or unreadable
    answer is not taken (it is asked again)."""
    want = [_as_read(request_json(r)) for r in asks]
    out: dict[int, Answer] = {}
    for p in pieces:
        if p.get("requests") != want:
            continue
        for j, a in zip(p.get("index") or (), p.get("answers") or ()):
            try:
                ans = answer_from_json(a)
            except LLMBenchError:
                continue
            if isinstance(j, int) and 0 <= j < len(asks) and not (isinstance(ans, Generation) and ans.failed):
                out[j] = ans
    return out


def unrecorded_answers(task: Task, out_dir: Path) -> list[str]:
    """What rejudging the run in ``out_dir`` would ask the model for: each document whose record a judge
    graded, or that has none, and whose recorded rounds stop before the first round that asks the judge,
    as ``"SUBJECT #ID: round K ..."`` (why, where a recorded round no longer holds). [] when the
    judge alone finishes the task (as far as its rounds up to the judge's show)."""
    docs = task.docs()
    run = _read_run(task, docs, out_dir, rejudge=True)
    out = []
    for d in docs:
        key = (d.subject, d.id)
        if key in run.old:
            continue
        _, _, asks, k, why = resumed_rounds(task, d, run.rounds.get(key, {}), rejudge=True)
        have = answered_in_round(asks, run.pieces.get(key, {}).get(k + 1, ()))
        if any(not isinstance(r, ForJudge) and j not in have for j, r in enumerate(asks)):
            out.append(f"{d.subject or task.name} #{d.id}: round {k + 1}" + (f" ({why})" if why else " not recorded"))
    return out


def _as_they_finish(r: Request, adapter: Adapter, judge: Adapter | None) -> bool:
    """Whether the adapter that answers ``r`` hands its answers over one by one (else a kind's answers
    come together, and pieces of a round would only be written to be read back at once)."""
    who, kind = (judge, r.request.kind) if isinstance(r, ForJudge) else (adapter, r.kind)
    return who is not None and kind in who.answers_as_they_finish


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
             on_docs: Callable[[int], None] | None = None, judge: Adapter | None = None,
             rejudge: bool = False) -> TaskResult:
    """Run one task; records go to ``out_dir`` (when given) as each document finishes. A chunk's
    documents go round by round (`Task.followup`) until none asks for more; ``judge`` answers
    `ForJudge` requests. Each round with another after it is recorded in ``DIR/partial_TASK.jsonl``,
    which ``resume`` continues from (see the module). ``rejudge`` (with ``resume``) drops the records of
    judged documents and grades their recorded answers again, with ``judge``."""
    if rejudge and not (resume and out_dir is not None):
        raise ValueError("rejudge grades the answers of an earlier run again: it needs resume and out_dir")
    docs = task.docs()
    path = out_dir / SAMPLES.format(task.name) if out_dir else None
    ppath = out_dir / PARTIAL.format(task.name) if out_dir else None
    old: dict[tuple[str, int], dict[str, Any]] = {}
    recorded: dict[tuple[str, int], dict[int, dict[str, Any]]] = {}
    pieces: dict[tuple[str, int], dict[int, list[dict[str, Any]]]] = {}
    if path is not None and ppath is not None and out_dir is not None and resume:
        run = _read_run(task, docs, out_dir, rejudge)
        old, recorded, pieces = run.old, run.rounds, run.pieces
        if rejudge:
            for p, keep in ((path, run.kept), (ppath, run.partial_kept)):
                if p.exists():
                    tmp = p.with_name(p.name + ".tmp")
                    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in keep or ()),
                                   encoding="utf-8")
                    tmp.replace(p)
    elif path is not None and ppath is not None:
        for p in (path, ppath):
            if p.exists():
                p.unlink()
    todo = [d for d in docs if (d.subject, d.id) not in old]
    if on_docs and old:
        on_docs(len(old))
    new: dict[tuple[str, int], dict[str, Any]] = {}
    errors: dict[tuple[str, int], str] = {}
    notes: list[str] = []
    rounds_resumed = rounds_dropped = answers_resumed = 0
    t0 = time.perf_counter()
    with contextlib.ExitStack() as stack:
        f = stack.enter_context(open(path, "a", encoding="utf-8")) if path is not None else None
        pf: Any = None                                  # opened at its first record: one-round tasks have none
        for group in _chunks(todo, chunk, task.chunk_by_subject):
            per_doc: list[list[Request]] = [[] for _ in group]
            got: list[list[Answer]] = [[] for _ in group]
            pending: list[list[Request]] = [[] for _ in group]
            rounds = [0] * len(group)                   # each document's rounds answered so far
            have: list[dict[int, Answer]] = [{} for _ in group]   # answers of its next round, recorded in pieces
            for i, d in enumerate(group):
                was = recorded.get((d.subject, d.id), {})
                per_doc[i], got[i], pending[i], rounds[i], why = resumed_rounds(task, d, was, rejudge)
                if not (rejudge and any(isinstance(r, ForJudge) for r in pending[i])):
                    have[i] = answered_in_round(pending[i], pieces.get((d.subject, d.id), {}).get(rounds[i] + 1, ()))
                    answers_resumed += len(have[i])
                rounds_resumed += rounds[i]
                if why is not None:
                    rounds_dropped += sum(1 for k in was if k > rounds[i])
                    notes.append(f"{d.subject or task.name} #{d.id}: {why}; recomputed from round {rounds[i] + 1}")
                elif rejudge and any(not isinstance(r, ForJudge) for r in pending[i]):
                    notes.append(f"{d.subject or task.name} #{d.id}: rejudged, but round {rounds[i] + 1} was not "
                                 "recorded: the model answered it")

            def write_partial(rec: dict[str, Any]) -> None:
                nonlocal pf
                if ppath is not None:
                    if pf is None:
                        pf = stack.enter_context(open(ppath, "a", encoding="utf-8"))
                    pf.write(json.dumps(rec, ensure_ascii=False) + "\n")
                    pf.flush()

            def finish(i: int, d: Doc, answers: list[Answer]) -> list[Request]:
                """A document's round is answered: its next round's requests (the round recorded as a
                partial record first), or [] once it is done (recorded, or failed)."""
                asked = pending[i]
                got[i] += answers
                rounds[i] += 1
                bad = [a.error or "failed" for a in answers if isinstance(a, Generation) and a.failed]
                more = [] if bad else list(task.followup(d, got[i]))
                if bad:
                    errors[(d.subject, d.id)] = bad[0]
                elif more:
                    per_doc[i] += more
                    write_partial(_partial(task, d, rounds[i], asked, answers))
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
                if not pending[i]:                  # a document that asks nothing (more) is done at once
                    pending[i] = finish(i, d, [])
                else:
                    per_doc[i] += pending[i]
            while any(pending):
                answers: list[list[Answer | None]] = [[have[i].get(j) for j in range(len(rs))]
                                                      for i, rs in enumerate(pending)]
                owner = [(i, j) for i, rs in enumerate(pending) for j in range(len(rs)) if answers[i][j] is None]
                flat = [pending[i][j] for i, j in owner]
                left = [sum(a is None for a in xs) for xs in answers]
                nxt: list[list[Request]] = [[] for _ in group]
                for i in range(len(group)):
                    if pending[i] and left[i] == 0:      # every answer of the round was recorded in pieces
                        nxt[i] = finish(i, group[i], answers[i])  # type: ignore[arg-type]

                def on_answer(k: int, a: Answer) -> None:
                    i, j = owner[k]
                    answers[i][j] = a
                    left[i] -= 1
                    lost = any(isinstance(x, Generation) and x.failed for x in answers[i])   # the round fails
                    if (left[i] > 0 or lost) and len(pending[i]) > 1 and not (isinstance(a, Generation) and a.failed) \
                            and _as_they_finish(pending[i][j], adapter, judge):
                        # a round of several requests, not done: this answer is kept in a piece of it
                        write_partial(_partial(task, group[i], rounds[i] + 1, pending[i], [a], [j]))
                    if left[i] == 0:
                        nxt[i] = finish(i, group[i], answers[i])  # type: ignore[arg-type]

                answer_all(flat, adapter, judge, task.name, on_answer)
                pending = nxt
                have = [{} for _ in group]
            for fh in (f, pf):
                if fh is not None:
                    os.fsync(fh.fileno())
    wall = time.perf_counter() - t0
    records = [kept for d in docs if (kept := old.get((d.subject, d.id)) or new.get((d.subject, d.id))) is not None]
    agg = aggregate(records, list(task.metrics), task.groups(), task.name, task.mean_metrics)
    timing = {"wall_s": wall, "docs_computed": len(new), "docs_resumed": len(old),
              "docs_per_s": len(new) / wall if wall > 0 and new else None,
              "docs_failed": len(errors), "errors": [f"{s or task.name} #{i}: {e}" for (s, i), e in errors.items()][:MAX_ERRORS],
              "requests": sum(len(r["requests"]) for r in records)}
    if recorded or pieces or rounds_resumed or notes:
        timing.update({"rounds_resumed": rounds_resumed, "rounds_recomputed": rounds_dropped,
                       "answers_resumed": answers_resumed, "notes": notes[:MAX_ERRORS]})
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
