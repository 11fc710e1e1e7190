"""``top_logprobs`` (``--top-logprobs N``): how many top log-probabilities per output token the
chain-of-thought tasks ask for. On the engine (stories260K, GSM8K CoT): the requests, records, settings
and decay table carry N, above the engine's 20 is refused, resume keeps N. Through an OpenAI-compatible
server (tests/eval_server.py): capped by default to what the adapter allows, an explicit N above it
refused before anything is sent.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from conftest import SHARED

from llmbench.cli import main
from llmbench.eval import evaluate
from llmbench.eval.openai_adapter import OpenAIAdapter

sys.path.insert(0, str(Path(__file__).parent))
from eval_server import MODEL, EvalServer  # noqa: E402

DATA = SHARED / "data"


@pytest.fixture(scope="module")
def gsm8k_data():
    if not (DATA / "gsm8k" / "test.jsonl").exists():
        pytest.skip(f"{DATA / 'gsm8k'} not found: the GSM8K data lives in ../shared/data")
    return DATA


def test_engine_uses_the_number_asked_for_and_resume_keeps_it(stories_path, gsm8k_data, tmp_path, capsys):
    args = ["eval", "gsm8k_cot", "--model", str(stories_path), "--shots", "1", "--limit", "2", "--threads", "1",
            "--data-dir", str(gsm8k_data), "--top-logprobs", "3", "--out", str(tmp_path), "--json"]
    assert main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    t = doc["tasks"]["gsm8k_cot"]
    assert doc["settings"]["top_logprobs"] == 3 and t["settings"]["top_logprobs"] == 3
    decay = t["cot_decay"]
    assert decay["top_logprobs"] == 3 and decay["top_logprobs_used"] == [3, 3] and "top 3 log-probabilities" in decay["entropy"]
    recs = [json.loads(x) for x in (tmp_path / "samples_gsm8k_cot.jsonl").read_text().splitlines()]
    assert all(r["requests"][0]["logprobs"] == 3 and r["cot"]["top_logprobs"] == 3 for r in recs)
    (tmp_path / "samples_gsm8k_cot.jsonl").write_text(json.dumps(recs[0]) + "\n")    # as if killed after one
    assert main(["eval", "--resume", str(tmp_path), "--json"]) == 0
    again = json.loads(capsys.readouterr().out)
    assert again["settings"]["top_logprobs"] == 3 and again["tasks"]["gsm8k_cot"]["timing"]["docs_resumed"] == 1
    assert again["tasks"]["gsm8k_cot"]["metrics"] == t["metrics"]


def test_engine_refuses_more_than_it_gives_and_zero_means_none(stories_path, gsm8k_data):
    with pytest.raises(ValueError, match="gives at most 20 top log-probabilities.*--top-logprobs 20"):
        evaluate(stories_path, "gsm8k_cot", shots=1, limit=1, data_dir=gsm8k_data, threads=1, top_logprobs=21)
    res = evaluate(stories_path, "gsm8k_cot", shots=1, limit=1, data_dir=gsm8k_data, threads=1, top_logprobs=0)
    c = res["gsm8k_cot"].records[0]["cot"]
    assert c["top_logprobs"] is None and "step_entropy" not in c and c["steps"] >= 0
    assert res["gsm8k_cot"].extra["cot_decay"]["entropy"].startswith("no entropies")


def test_a_server_limit_caps_the_default_and_refuses_more(gsm8k_data):
    with EvalServer() as srv:
        srv.gen_text = " 2 + 2 = 4. The answer is 4.\n\nQ: next"
        a = OpenAIAdapter(srv.base_url, MODEL, max_top_logprobs={"completions": 5})
        res = evaluate(a, "gsm8k_cot", limit=1, data_dir=gsm8k_data)
        assert srv.bodies()[-1]["logprobs"] == 5
        assert res.settings["top_logprobs"] == 5 and "capped to 5" in res.settings["top_logprobs_capped"]
        decay = res["gsm8k_cot"].extra["cot_decay"]
        assert decay["top_logprobs_used"] == [5, 5] and "top 5 log-probabilities" in decay["entropy"]
        n = len(srv.requests)
        with pytest.raises(ValueError, match=r"--top-logprobs 8 .* gives at most 5"):
            evaluate(a, "gsm8k_cot", limit=1, data_dir=gsm8k_data, top_logprobs=8)
        assert len(srv.requests) == n
        plain = evaluate(MODEL, "gsm8k_cot", backend="openai", base_url=srv.base_url, limit=1, data_dir=gsm8k_data)
        assert plain.settings["top_logprobs"] == 20 and srv.bodies()[-1]["logprobs"] == 20   # no limit known
