"""What tasks and models exchange: lm-evaluation-harness's three request kinds, their answers, and
the two protocols the evaluation layer is built on.

A `Task` turns documents into requests and scores the answers; an `Adapter` answers requests. No task
knows which adapter runs it, so MMLU runs the same on llmbench's engine (`EngineAdapter`) and on any
OpenAI-compatible server (`OpenAIAdapter`).

- ``Loglikelihood(context, continuation)`` -> ``LLAnswer(logprob, greedy)``: the summed log-probability
  of the continuation's tokens after the context, and whether each was the greedy choice.
- ``LoglikelihoodRolling(text)`` -> ``RollingAnswer(logprob, n_tokens)``: the whole text's
  log-probability, scored in windows of the model's context as lm-eval does.
- ``GenerateUntil(context, until, ...)`` -> ``Generation``: text sampled until a stop string, EOS or
  ``max_tokens``, with per-token log-probabilities when asked for.
- ``ForJudge(GenerateUntil(...))`` -> ``Generation``: the same, answered by the judge adapter.

A task whose requests depend on earlier answers (a second turn, a judge's verdict) returns them from
`Task.followup`; the runner asks for them round by round, each round batched over the documents.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar, Union

from .. import LLMBenchError


@dataclass(frozen=True)
class Loglikelihood:
    """A request for log P(continuation | context), and whether the continuation is the greedy one."""

    context: str
    continuation: str
    kind: ClassVar[str] = "loglikelihood"


@dataclass(frozen=True)
class LoglikelihoodRolling:
    """A request for the log-likelihood of a whole text (rolling windows where it is longer than the context)."""

    text: str
    kind: ClassVar[str] = "loglikelihood_rolling"


@dataclass(frozen=True)
class GenerateUntil:
    """``context``: prompt text, or chat messages ([{"role", "content"}]) sent through the model's
    chat template. Greedy by default, as lm-eval's generative tasks are."""

    context: str | tuple[dict[str, str], ...]
    until: tuple[str, ...] = ()
    max_tokens: int = 256
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0
    min_p: float = 0.0
    seed: int | None = None
    logprobs: int | None = None          # top-n log-probabilities per output token (0..20)
    kind: ClassVar[str] = "generate_until"


@dataclass(frozen=True)
class ForJudge:
    """A request for the judge model (``--judge``: MT-Bench's grading), not the model under evaluation."""

    request: GenerateUntil
    kind: ClassVar[str] = "judge"


Request = Union[Loglikelihood, LoglikelihoodRolling, GenerateUntil, ForJudge]


@dataclass
class LLAnswer:
    """The answer to a `Loglikelihood`: the continuation's summed log-probability and whether every token was greedy."""

    logprob: float
    greedy: bool


@dataclass
class RollingAnswer:
    """The answer to a `LoglikelihoodRolling`: the text's summed log-probability over ``n_tokens`` tokens."""

    logprob: float
    n_tokens: int


@dataclass
class Generation:
    """The answer to a `GenerateUntil`: the text, why it ended, and the token log-probabilities when asked."""

    text: str
    finish_reason: str                                   # "stop", "length", "abort" or "error"
    n_tokens: int | None = None
    token_logprobs: list[float] | None = None
    top_logprobs: list[dict[str, float]] | None = None   # token text -> logprob, per output token
    tokens: list[str] | None = None                      # each output token's text (with logprobs)
    error: str | None = None    # finish_reason "error": why the request failed (every retry); never recorded

    @property
    def failed(self) -> bool:
        """Whether the request failed (``finish_reason == "error"``; ``error`` says why)."""
        return self.finish_reason == "error"


Answer = Union[LLAnswer, RollingAnswer, Generation]


def request_json(r: Request) -> dict[str, Any]:
    """A request as a per-sample record holds it."""
    d = asdict(r)
    d["kind"] = r.kind
    return d


def answer_json(a: Answer) -> dict[str, Any]:
    """An answer as a JSON-serializable dict (its fields; ``error`` left out when there is none)."""
    d = asdict(a)
    if d.get("error", 0) is None:       # failed answers are never recorded: the field would say nothing
        del d["error"]
    return d


def answer_from_json(d: Mapping[str, Any]) -> Answer:
    """The inverse of `answer_json`: a `Generation` (it has ``text``), an `LLAnswer` (``greedy``) or a
    `RollingAnswer` (``n_tokens`` without ``text``) from its dict; `LLMBenchError` for anything else."""
    try:
        if isinstance(d, Mapping) and "text" in d:
            return Generation(**d)
        if isinstance(d, Mapping) and "greedy" in d:
            return LLAnswer(**d)
        if isinstance(d, Mapping) and "n_tokens" in d:
            return RollingAnswer(**d)
    except TypeError as e:          # a field the class does not have, or one missing
        raise LLMBenchError(f"not an answer as answer_json writes it ({e}): {str(d)[:200]}") from e
    raise LLMBenchError(f"not an answer as answer_json writes it (no text, greedy or n_tokens): {str(d)[:200]}")


class AdapterError(LLMBenchError, RuntimeError):
    """An adapter could not answer (a server without echo/logprobs, every retry failed, ...): the
    message says what to do."""


OnAnswer = Callable[[int, Answer], None]


class Adapter(ABC):
    """Answers requests. ``answer`` takes a mixed list and returns the answers in the same order;
    subclasses implement the three kinds, each over a list (so they can batch and share prefixes).

    A kind's method may take ``on_answer(i, answer)``, called as each of its requests is answered (in
    the order they finish), when the adapter lists the kind in ``answers_as_they_finish``; for the
    others ``answer`` calls it once the kind's list is done. The runner writes per-sample records from
    it, so an interrupted run loses only the requests in flight."""

    name: str = "?"
    #: the activation precision of the numbers this adapter returns ("q8", "f32", "server", ...)
    precision: str = "?"
    #: the kinds whose method takes ``on_answer`` and calls it as each request finishes
    answers_as_they_finish: ClassVar[tuple[str, ...]] = ()

    def answer(self, reqs: Sequence[Request], progress: Callable[[int], None] | None = None,
               on_answer: OnAnswer | None = None) -> list[Answer]:
        """The answers to ``reqs``, in their order; each kind of request goes to its method as one list.

        ``progress(n)`` is called after each kind with the ``n`` requests it answered; ``on_answer(i,
        answer)`` as each request is answered (see the class).
        """
        out: list[Answer | None] = [None] * len(reqs)
        by_kind: dict[str, list[int]] = {}
        for i, r in enumerate(reqs):
            by_kind.setdefault(r.kind, []).append(i)
        for kind, idx in by_kind.items():
            fn = getattr(self, kind)
            sub = [reqs[i] for i in idx]
            if on_answer is not None and kind in self.answers_as_they_finish:
                got = fn(sub, on_answer=lambda j, a, idx=idx: on_answer(idx[j], a))
            else:
                got = fn(sub)
                if on_answer is not None:
                    for i, a in zip(idx, got):
                        on_answer(i, a)
            for i, a in zip(idx, got):
                out[i] = a
            if progress:
                progress(len(idx))
        return out  # type: ignore[return-value]

    @abstractmethod
    def loglikelihood(self, reqs: Sequence[Loglikelihood]) -> list[LLAnswer]:
        """Answer log-likelihood requests, in their order."""

    @abstractmethod
    def loglikelihood_rolling(self, reqs: Sequence[LoglikelihoodRolling]) -> list[RollingAnswer]:
        """Answer whole-text log-likelihood requests, in their order."""

    @abstractmethod
    def generate_until(self, reqs: Sequence[GenerateUntil]) -> list[Generation]:
        """Answer generation requests, in their order."""

    @abstractmethod
    def environment(self) -> dict[str, Any]:
        """What produced the numbers: the `environment` block of results.json."""

    def top_logprobs_limit(self, chat: bool = False) -> int | None:
        """The most top log-probabilities per output token a generation may ask for (on chat messages
        or a prompt string); None where no limit is known."""
        return None

    def close(self) -> None:
        """Release what the adapter holds (a model, an HTTP client). Nothing by default."""
        pass


@dataclass
class Doc:
    """One document of a task: ``id`` is its stable index within the task (resume keys on
    (subject, id)), ``subject`` the subtask it belongs to ("" when the task has none)."""

    id: int
    subject: str
    data: dict[str, Any]


@dataclass
class Scored:
    """A task's verdict on one document: metric values, and what the per-sample record shows."""

    metrics: Mapping[str, float | None]   # None: not measured on this document, left out of the aggregate
    target: Any = None
    pred: Any = None
    extra: dict[str, Any] = field(default_factory=dict)


class Task(ABC):
    """A task: documents, their requests, and how answers score. ``groups`` maps each subject to the
    group it is aggregated in (lm-eval's), or is empty."""

    name: str = "?"
    version: str = "0"
    #: metric name -> higher is better (a task whose metrics depend on its options sets its own)
    metrics: dict[str, bool] = {"acc": True}
    #: chunks hold one subject's documents (whose prompts share a few-shot header); False lets a chunk span
    #: subjects, for tasks whose subjects share nothing and batch better together (MT-Bench's categories)
    chunk_by_subject: ClassVar[bool] = True
    #: metrics that are means of values, never proportions, even where every value is 0 or 1 (a rating)
    mean_metrics: tuple[str, ...] = ()

    @abstractmethod
    def docs(self) -> list[Doc]:
        """The documents to score, in a fixed order (after ``limit`` and ``subjects``)."""

    @abstractmethod
    def requests(self, doc: Doc) -> list[Request]:
        """The requests one document needs answered."""

    @abstractmethod
    def score(self, doc: Doc, answers: Sequence[Answer]) -> Scored:
        """A document's metric values from the answers to its requests (in the order `requests` gave)."""

    def followup(self, doc: Doc, answers: Sequence[Answer]) -> list[Request]:
        """More requests for ``doc`` once ``answers`` (to all its requests so far, in order) are in: a
        dialogue's next turn, a judge's verdict. [] when the document is complete (by default after its
        `requests`); `score` then sees all answers in order."""
        return []

    def answer_record(self, a: Answer) -> dict[str, Any]:
        """An answer as the per-sample record holds it (a task may leave bulky parts out)."""
        return answer_json(a)

    def extra_results(self, records: Sequence[dict[str, Any]]) -> dict[str, Any]:
        """More of the task's results from its per-sample records (all of them, resumed ones too), beside
        the metrics in results.json: e.g. ``cot_decay``. Nothing by default."""
        return {}

    def prompt(self, doc: Doc) -> str:
        """The prompt of a document as the sample record shows it."""
        r = self.requests(doc)[0]
        ctx = getattr(r, "context", None)
        return ctx if isinstance(ctx, str) else str(getattr(r, "text", r))

    def groups(self) -> dict[str, str]:
        """Each subject's group, for aggregation as lm-eval reports it; empty by default (no groups)."""
        return {}

    def settings(self) -> dict[str, Any]:
        """What the task was run with (shots, split, limit, ...), for results.json."""
        return {}
