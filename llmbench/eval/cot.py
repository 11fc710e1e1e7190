"""Chain-of-thought decay data: reasoning steps, their token entropy, and accuracy by step count.

The seed studies plot a model's accuracy against the number of reasoning steps it wrote (the "accuracy
decay curve by reasoning step") and the model's uncertainty along the way. For every generative answer
of a chain-of-thought task (gsm8k_cot, mmlu_cot, mmlu_cot_zeroshot) this module gives:

**Steps.** The rule: the generated text is cut into sentences, at every line break and after every
".", "!" or "?" that is followed by white space (closing quotes or brackets may stand between), except
after a few abbreviations (``ABBREVIATIONS``: "e.g.", "i.e.", "vs.", "Mr.", "Dr.", ...). A decimal point
("3.5") or "5.00" is followed by a digit, so it never ends a sentence. A sentence counts when it holds a
letter or a digit (a line of "---" does not). The *final answer* is the first sentence in which the
task's answer cue occurs (gsm8k_cot: "The answer is"; mmlu_cot: lm-eval's strict patterns "answer is",
"The answer:", "The final answer:"); the reasoning steps are the sentences before it, and their number
is the step count. An answer without the cue (it ran out of tokens, or never concluded) has
``answered: false`` and all its sentences count as steps. So "Leah had 32. Her sister had 42. 32 + 42 =
74. The answer is 74." has 3 steps, and "Step 1: add.\\nStep 2: subtract.\\nThe answer is (B)." has 2.

**Entropy per step.** Each output token's distribution is known through its top-k log-probabilities:
k = ``top_logprobs``, an option (``--top-logprobs N``, ``evaluate(top_logprobs=N)``), by default
``TOP_LOGPROBS`` = 20 (the most the engine gives, and vLLM's default --max-logprobs), capped to what
the adapter gives where that is less (OpenAI's own completions API: 5); 0 asks for none, and the
answers then carry steps without entropies. From the top-k probabilities p_1 >= ... >= p_k, with tail mass T = 1 - sum(p_i) (what the k entries
miss), the token's entropy H (nats) is bounded:

    H >= H_k + T * (-log p_k)        where H_k = -sum_i p_i log p_i over the top k
    H <= H_k + T * log((V - k) / T)  (V the vocabulary size: the tail spread evenly)

The lower bound holds because every token outside the top k has probability at most p_k, so each
contributes at least p * (-log p_k). The figure reported per token is that lower bound, ``entropy``,
beside ``tail`` = T, which says how loose it can be (T = 0: exact). A step's entropy is the mean of its
tokens' lower bounds (a token belongs to the sentence in which its first non-blank character lies; white
space between sentences goes with the sentence before; tokens after the final-answer sentence, such as a
next "Q:" the model went on to write, count nowhere), and its ``tail`` the mean tail mass. Servers that return no
top log-probabilities give steps without entropies.

**Decay tables.** `decay_table` gathers per-sample records into, per subject, per group (where the task
has groups) and for the whole task, for each step count n: how many answers had n steps, how many of
them were right under each metric, the accuracy with its 95% Wilson interval, and the mean entropy at
each step position of those answers: the data a notebook fits (results.json ``cot_decay``), with
``top_logprobs`` (k asked for), ``top_logprobs_used`` (the fewest and most entries the answers' tokens
had: a server may send fewer than asked) and ``entropy``, a sentence saying what the figures bound.

Tested in tests/test_eval_cot.py on crafted texts and log-probability lists.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from .api import Answer, answer_json
from .metrics import wilson

TOP_LOGPROBS = 20      # the engine's most (SamplingParams.logprobs 0..20), and vLLM's default --max-logprobs


def check_top_logprobs(n: object) -> int:
    """``n`` as the top log-probabilities a chain-of-thought task asks for, or ValueError saying why not."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"top_logprobs must be an int >= 0 (got {n!r}): how many top log-probabilities per "
                         f"output token the entropy bound uses, {TOP_LOGPROBS} by default, 0 for none")
    return n
ABBREVIATIONS = ("e.g.", "i.e.", "vs.", "cf.", "mr.", "mrs.", "ms.", "dr.", "prof.", "st.")
# A sentence ends at a line break, or after . ! ? (closing quotes/brackets allowed) followed by white space.
_BOUNDARY = re.compile(r"\n|(?<=[.!?])([\"'\u201d\u2019)\]]*)[ \t\r\f\v]+")
_WORD = re.compile(r"[^\W_]")


def sentences(text: str) -> list[tuple[int, int]]:
    """(start, end) of each sentence of ``text`` that holds a letter or digit, white space trimmed."""
    spans, start = [], 0
    for m in _BOUNDARY.finditer(text):
        end = m.start() + len(m.group(1) or "")        # closing quotes and brackets end the sentence
        if m.group() != "\n" and _last_word(text[start: end]) in ABBREVIATIONS:
            continue                        # "e.g. " does not end a sentence
        spans.append((start, end))
        start = m.end()
    spans.append((start, len(text)))
    out = []
    for a, b in spans:
        piece = text[a:b]
        if _WORD.search(piece):
            lead = len(piece) - len(piece.lstrip())
            out.append((a + lead, a + len(piece.rstrip())))
    return out


def _last_word(s: str) -> str:
    parts = s.split()
    return parts[-1].lstrip("(\"'\u201c\u2018[").lower() if parts else ""


def split_steps(text: str, cue: str | re.Pattern[str]) -> tuple[list[tuple[int, int]], tuple[int, int] | None]:
    """(reasoning steps, final-answer sentence) of a generated text: the steps are the sentences before
    the first one in which ``cue`` (a regex) occurs; without the cue, every sentence is a step and the
    answer is None."""
    sents = sentences(text)
    pat = re.compile(cue) if isinstance(cue, str) else cue
    m = pat.search(text)
    if m is None:
        return sents, None
    for i, (_, b) in enumerate(sents):
        if b > m.start():
            return sents[:i], sents[i]
    return sents, None


def token_entropy(top: dict[str, float] | Sequence[float] | None) -> tuple[float, float] | None:
    """(lower bound of the entropy in nats, tail mass) of one token's distribution from its top-k
    log-probabilities (see the module docstring); None when there are none."""
    if not top:
        return None
    lps = [float(v) for v in (top.values() if isinstance(top, dict) else top) if v is not None and v > -math.inf]
    if not lps:
        return None
    ps = [math.exp(v) for v in lps]
    tail = max(0.0, 1.0 - math.fsum(ps))
    h = -math.fsum(p * v for p, v in zip(ps, lps))
    return h + tail * -min(lps), tail


def entropy_upper(top: dict[str, float] | Sequence[float], vocab: int) -> float:
    """The upper bound of the module docstring: the tail mass spread evenly over the other tokens."""
    lps = [float(v) for v in (top.values() if isinstance(top, dict) else top)]
    ps = [math.exp(v) for v in lps]
    tail = max(0.0, 1.0 - math.fsum(ps))
    h = -math.fsum(p * v for p, v in zip(ps, lps))
    return h + (tail * math.log((vocab - len(lps)) / tail) if tail > 0 else 0.0)


def token_offsets(tokens: Sequence[str]) -> list[int]:
    """Where each token's first non-blank character lies in their concatenation (where the token
    starts, for a token of white space alone)."""
    out, at = [], 0
    for t in tokens:
        out.append(at + (len(t) - len(t.lstrip()) if t.strip() else 0))
        at += len(t)
    return out


def analyse(text: str, cue: str | re.Pattern[str], tokens: Sequence[str] | None = None,
            top_logprobs: Sequence[dict[str, float] | None] | None = None) -> dict[str, Any]:
    """The decay data of one answer, as per-sample records keep it (``cot``): ``steps`` (the count),
    ``answered``, ``step_spans`` (character spans of the steps in the text), ``answer_span``, and with
    top log-probabilities ``step_entropy``/``step_tail``/``step_tokens`` (per step: mean entropy lower
    bound, mean tail mass, tokens), ``answer_entropy``, ``token_entropy`` and ``token_tail`` (per
    output token up to the end of the text, rounded to 5 decimals)."""
    steps, answer = split_steps(text, cue)
    out: dict[str, Any] = {"steps": len(steps), "answered": answer is not None,
                           "step_spans": [list(s) for s in steps], "answer_span": list(answer) if answer else None,
                           "top_logprobs": None}
    if not tokens or not top_logprobs or len(tokens) != len(top_logprobs):
        return out
    per_token = [token_entropy(t) for t in top_logprobs]
    if any(e is None for e in per_token):
        return out
    offs = token_offsets(tokens)
    keep = [i for i, o in enumerate(offs) if o < len(text)]
    n = len(steps)
    groups: list[list[int]] = [[] for _ in range(n + 1)]        # the steps, then the answer sentence
    for i in keep:
        o = offs[i]
        if answer is not None and o >= answer[0]:
            if o < answer[1]:
                groups[n].append(i)
        elif n:
            groups[max((k for k, s in enumerate(steps) if s[0] <= o), default=0)].append(i)

    def mean(idx: list[int], k: int) -> float | None:
        return round(math.fsum(per_token[i][k] for i in idx) / len(idx), 6) if idx else None  # type: ignore[index]

    out.update({"top_logprobs": max(len(t) for t in top_logprobs if t),
                "step_entropy": [mean(g, 0) for g in groups[:n]], "step_tail": [mean(g, 1) for g in groups[:n]],
                "step_tokens": [len(g) for g in groups[:n]],
                "answer_entropy": mean(groups[n], 0) if answer else None,
                "token_entropy": [round(per_token[i][0], 5) for i in keep],   # type: ignore[index]
                "token_tail": [round(per_token[i][1], 5) for i in keep]})     # type: ignore[index]
    return out


def decay_table(records: Sequence[dict[str, Any]], metrics: Sequence[str],
                groups: dict[str, str] | None = None, top_logprobs: int = TOP_LOGPROBS) -> dict[str, Any]:
    """Accuracy by step count, from per-sample records that carry ``cot`` (`analyse`): {"subjects": {s:
    table}, "groups": {g: table}, "all": table}, a table being {step count (a string): {"n", "answered",
    metric: {"correct", "acc", "ci95"} for each metric, "mean_entropy": [mean step entropy at each step
    position, None where no answer had entropies], "mean_answer_entropy"}}, and ``top_logprobs`` (k asked
    for), ``top_logprobs_used`` and ``entropy`` (`entropy_note`). Records without ``cot`` (written before
    it existed) are left out."""
    def table(recs: list[dict[str, Any]]) -> dict[str, Any]:
        by_n: dict[int, list[dict[str, Any]]] = {}
        for r in recs:
            by_n.setdefault(int(r["cot"]["steps"]), []).append(r)
        out = {}
        for n in sorted(by_n):
            rs = by_n[n]
            row: dict[str, Any] = {"n": len(rs), "answered": sum(bool(r["cot"]["answered"]) for r in rs)}
            for m in metrics:
                vals = [float(r["metrics"][m]) for r in rs if r["metrics"].get(m) is not None]
                k = sum(vals)
                ci = wilson(k, len(vals))
                row[m] = {"correct": k, "acc": k / len(vals) if vals else None, "ci95": list(ci) if ci else None}
            ent = [r["cot"].get("step_entropy") for r in rs if r["cot"].get("step_entropy") is not None]
            row["mean_entropy"] = [_mean([e[i] for e in ent if e[i] is not None]) for i in range(n)] if ent else None
            row["mean_answer_entropy"] = _mean([r["cot"]["answer_entropy"] for r in rs
                                                if r["cot"].get("answer_entropy") is not None])
            out[str(n)] = row
        return out

    recs = [r for r in records if isinstance(r.get("cot"), dict)]
    subjects: dict[str, list[dict[str, Any]]] = {}
    for r in recs:
        subjects.setdefault(r["subject"], []).append(r)
    by_group: dict[str, list[dict[str, Any]]] = {}
    for s, rs in subjects.items():
        if groups and s in groups:
            by_group.setdefault(groups[s], []).extend(rs)
    used = sorted({int(r["cot"]["top_logprobs"]) for r in recs if r["cot"].get("top_logprobs")})
    return {"rule": "sentences before the final-answer sentence (llmbench.eval.cot)", "top_logprobs": top_logprobs,
            "top_logprobs_used": [used[0], used[-1]] if used else None, "entropy": entropy_note(top_logprobs, used),
            "metrics": list(metrics), "subjects": {s: table(rs) for s, rs in subjects.items()},
            "groups": {g: table(rs) for g, rs in sorted(by_group.items())}, "all": table(recs)}


def entropy_note(asked: int, used: Sequence[int]) -> str:
    """What the entropy figures of a decay table are, with the number of top entries they came from."""
    if not used:
        why = "0 were asked for" if asked == 0 else f"{asked} were asked for and the answers carried none"
        return f"no entropies: they need top log-probabilities per token, and {why}"
    k = str(used[0]) if used[0] == used[-1] else f"{used[0]} to {used[-1]}"
    short = f" ({asked} were asked for: the server sent fewer)" if used[-1] < asked else ""
    return (f"each token's entropy (nats) is a lower bound from its top {k} log-probabilities{short}: "
            f"H_k + T * -log p_k, T the probability mass the {k} entries miss (token_tail, step_tail); exact "
            "where T = 0, else below the true entropy by at most T * log((V - k) / T) - T * -log p_k")


def _mean(xs: Sequence[float]) -> float | None:
    return round(math.fsum(xs) / len(xs), 6) if xs else None


def answer_record(a: Answer) -> dict[str, Any]:
    """An answer as a chain-of-thought task's per-sample record keeps it: the top log-probabilities
    (``top_logprobs`` entries a token) are left out, their summary being the record's ``cot`` (``token_entropy``,
    ``token_tail``); text, tokens and their log-probabilities stay."""
    d = answer_json(a)
    if d.get("top_logprobs") is not None:
        d["top_logprobs"] = None
    return d
