"""The eval adapter's streamed generation against `llmbench serve` (the real engine on stories260K, in a
thread of this process): the same text, finish reason, token count and log-probabilities as the same
requests sent whole, on completions and chat, with stop strings and max_tokens; and the text llmbench's
engine gives in-process. Drops, error events and servers without usage are tested on
tests/eval_server.py (tests/test_eval_openai.py).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("starlette")
pytest.importorskip("uvicorn")

sys.path.insert(0, str(Path(__file__).parent))
from test_serve import NAME, TEMPLATE, serving  # noqa: E402

from llmbench import LLM  # noqa: E402
from llmbench.eval.api import GenerateUntil  # noqa: E402
from llmbench.eval.openai_adapter import OpenAIAdapter  # noqa: E402
from llmbench.llm import SamplingParams  # noqa: E402

PROMPTS = ["Once upon a time", "The cat sat on", "Lily and Ben went to the park", "One day, a little bird"]


@pytest.fixture(scope="module")
def live(stories_path):
    with serving(stories_path) as (url, _):
        yield url


def _requests() -> list[GenerateUntil]:
    chat = ({"role": "user", "content": "Tell me a story"},)
    return ([GenerateUntil(p, until=(".",), max_tokens=40) for p in PROMPTS]
            + [GenerateUntil(p, until=(), max_tokens=7, logprobs=3) for p in PROMPTS[:2]]
            + [GenerateUntil(PROMPTS[2], until=("a", "b", "c", "d", " the"), max_tokens=30, logprobs=2),  # 5 stops
               GenerateUntil(chat, until=("\n",), max_tokens=20, logprobs=2), GenerateUntil(chat, max_tokens=9)])


def test_streamed_generation_is_the_same_as_whole(live):
    reqs = _requests()
    streamed = OpenAIAdapter(live, NAME, concurrency=4)
    whole = OpenAIAdapter(live, NAME, concurrency=4, stream=False)
    got, want = streamed.generate_until(reqs), whole.generate_until(reqs)
    assert got == want
    assert [g.finish_reason for g in got[4:6]] == ["length", "length"] and got[4].n_tokens == 7
    assert all(g.n_tokens for g in got) and sum(bool(g.text) for g in got) >= 8
    assert len(got[4].top_logprobs[0]) == 3 and len(got[6].tokens) == len(got[6].token_logprobs) == 3
    assert streamed.stats == {"requests": len(reqs), "retries": 0, "failures": 0}   # usage came in a final chunk


def test_streamed_text_is_the_engines(live, stories_path):
    llm = LLM(stories_path, threads=1)
    gens = OpenAIAdapter(live, NAME).generate_until([GenerateUntil(p, until=(".",), max_tokens=40) for p in PROMPTS])
    for p, g in zip(PROMPTS, gens):
        ref = llm.generate(p, SamplingParams(temperature=0, max_tokens=40, stop=["."]))[0]
        assert g.text == ref.text and g.n_tokens == len(ref.token_ids)
    chat = [{"role": "user", "content": "Tell me a story"}]
    g = OpenAIAdapter(live, NAME).generate_until([GenerateUntil(tuple(chat), max_tokens=20)])[0]
    assert g.text == llm.chat(chat, SamplingParams(temperature=0, max_tokens=20), chat_template=TEMPLATE)[0].text
