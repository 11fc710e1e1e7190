"""MT-Bench as FastChat's llm_judge defines it: the judge prompts filled byte for byte for real questions
(expected strings written out by hand from judge_prompts.jsonl's templates), the rating parser and the
consistency figure on crafted judgments, the two turns and the judge requests a question makes, the task
end to end on stories260K judged by stories260K (unparseable ratings counted, resume) and through two
OpenAI-compatible test servers, one the model and one the judge (tests/eval_server.py)."""

from __future__ import annotations

import copy
import json
import shutil
import signal
import subprocess
import sys
import time

import jsonschema
import pytest
from conftest import ROOT, SHARED

from llmbench.eval import evaluate, make_task
from llmbench.eval.api import Adapter, ForJudge, Generation
from llmbench.eval.results import SCHEMA
from llmbench.eval.runner import read_samples
from llmbench.eval.tasks.mt_bench import ZERO_SHOT_TEMPLATE, consistency, parse_rating

DATA = SHARED / "data"

# judge_prompts.jsonl's instructions, copied by hand
SINGLE_V1 = (
    "[Instruction]\nPlease act as an impartial judge and evaluate the quality of the response provided by an AI "
    "assistant to the user question displayed below. Your evaluation should consider factors such as the "
    "helpfulness, relevance, accuracy, depth, creativity, and level of detail of the response. Begin your "
    "evaluation by providing a short explanation. Be as objective as possible. After providing your explanation, "
    "you must rate the response on a scale of 1 to 10 by strictly following this format: \"[[rating]]\", for "
    "example: \"Rating: [[5]]\".\n\n")
MATH_MT_SYSTEM = (
    "Please act as an impartial judge and evaluate the quality of the response provided by an AI assistant to the "
    "user question. Your evaluation should consider correctness and helpfulness. You will be given a reference "
    "answer and the assistant's answer. You evaluation should focus on the assistant's answer to the second "
    "question. Begin your evaluation by comparing the assistant's answer with the reference answer. Identify and "
    "correct any mistakes. Be as objective as possible. After providing your explanation, you must rate the "
    "response on a scale of 1 to 10 by strictly following this format: \"[[rating]]\", for example: "
    "\"Rating: [[5]]\".\n\n")


@pytest.fixture(scope="module")
def mt_data():
    if not (DATA / "mt_bench" / "question.jsonl").exists():
        pytest.skip(f"{DATA / 'mt_bench'} not found: the MT-Bench data lives in ../shared/data")
    return DATA


def _doc(task, qid):
    return next(d for d in task.docs() if d.id == qid)


def test_judge_prompt_single_v1_byte_exact(mt_data):
    """Question 81 (writing), turn 1: single-v1, system "You are a helpful assistant."."""
    t = make_task("mt_bench", subjects=["writing"], limit=1, data_dir=mt_data)
    doc = _doc(t, 81)
    answer = "Aloha! Hawaii was {wonderful}."          # braces in an answer stay as they are
    system, user = t.judge_requests(doc, [answer, "A second."])[0].request.context
    assert system == {"role": "system", "content": "You are a helpful assistant."}
    assert user["role"] == "user" and user["content"] == (
        SINGLE_V1 + "[Question]\nCompose an engaging travel blog post about a recent trip to Hawaii, highlighting "
        "cultural experiences and must-see attractions.\n\n[The Start of Assistant's Answer]\nAloha! Hawaii was "
        "{wonderful}.\n[The End of Assistant's Answer]")


def test_judge_prompt_math_multi_turn_byte_exact(mt_data):
    """Question 111 (math), turn 2: single-math-v1-multi-turn with GPT-4's two reference answers."""
    t = make_task("mt_bench", subjects=["math"], limit=1, data_dir=mt_data)
    doc = _doc(t, 111)
    refs = [json.loads(x) for x in (mt_data / "mt_bench" / "reference_answer" / "gpt-4.jsonl").read_text().splitlines()]
    ref = next(r for r in refs if r["question_id"] == 111)["choices"][0]["turns"]
    j1, j2 = t.judge_requests(doc, ["It is 3.", "It is 5 pi."])
    assert j2.request.context[0] == {"role": "system", "content": MATH_MT_SYSTEM}
    assert j2.request.context[1]["content"] == (
        "<|The Start of Reference Answer|>\n\n### User:\nThe vertices of a triangle are at points (0, 0), (-1, 1), "
        "and (3, 3). What is the area of the triangle?\n\n### Reference answer:\n" + ref[0] + "\n\n### User:\n"
        "What's area of the circle circumscribing the triangle?\n\n### Reference answer:\n" + ref[1] + "\n\n"
        "<|The End of Reference Answer|>\n\n\n<|The Start of Assistant A's Conversation with User|>\n\n### User:\n"
        "The vertices of a triangle are at points (0, 0), (-1, 1), and (3, 3). What is the area of the triangle?"
        "\n\n### Assistant A:\nIt is 3.\n\n### User:\nWhat's area of the circle circumscribing the triangle?\n\n"
        "### Assistant A:\nIt is 5 pi.\n\n<|The End of Assistant A's Conversation with User|>")
    assert "[The Start of Reference Answer]\n" + ref[0] + "\n[The End of Reference Answer]" in j1.request.context[1]["content"]
    assert j1.request.temperature == j2.request.temperature == 0.0 and j1.request.max_tokens == 2048


@pytest.mark.parametrize("judgment, want", [
    ("The answer is good. Rating: [[5]]", 5.0),
    ("Rating: [[8.5]]", 8.5),
    ("Rating: [[10]]", 10.0),
    ("I would give it [7] out of 10.", 7.0),           # FastChat's backup pattern
    ("First [[7]], on reflection [[3]]", 7.0),          # the first match
    ("Point [1] is wrong... Rating: [[9]]", 9.0),       # [[n]] wins over an earlier [n]
    ("Rating: [[15]]", 15.0),                           # out of range: kept, as FastChat keeps it
    ("Rating: 5/10", None),
    ("Rating: [[ 5 ]]", None),
    ("Rating: [[rating]]", None),
    ("[5, 6]", None),
    ("", None),
])
def test_rating_parser(judgment, want):
    assert parse_rating(judgment) == want


def test_consistency_figure():
    assert consistency(5.0, 7.0) == 1.0 and consistency(6.0, 6.0) == 1.0 and consistency(7.0, 5.0) == 0.0
    assert consistency(None, 5.0) is None and consistency(5.0, None) is None


def test_turns_then_judgments_then_done(mt_data):
    """Turn 1 alone, turn 2 with the model's stripped answer, then the two judge requests, then nothing;
    the category's temperature and a seed where it samples."""
    t = make_task("mt_bench", subjects=["writing", "math"], limit=1, data_dir=mt_data)
    w, m = _doc(t, 81), _doc(t, 111)
    (r1,) = t.requests(w)
    assert r1.context == ({"role": "user", "content": w.data["turns"][0]},)
    assert r1.temperature == 0.7 and r1.seed == 81 and r1.max_tokens == 1024 and r1.until == ()
    (r2,) = t.followup(w, [Generation("  Aloha!\n", "stop")])
    assert r2.context == ({"role": "user", "content": w.data["turns"][0]}, {"role": "assistant", "content": "Aloha!"},
                          {"role": "user", "content": w.data["turns"][1]})
    js = t.followup(w, [Generation(" Aloha!", "stop"), Generation("A day.", "stop")])
    assert len(js) == 2 and all(isinstance(j, ForJudge) for j in js)
    assert "[The Start of Assistant's Answer]\nAloha!\n" in js[0].request.context[1]["content"]
    assert t.followup(w, [Generation("x", "stop")] * 4) == []
    assert t.requests(m)[0].temperature == 0.0 and t.requests(m)[0].seed is None
    assert [d.subject for d in t.docs()] == ["writing", "math"]


def test_score_counts_unparseable_and_excludes_them(mt_data):
    t = make_task("mt_bench", subjects=["writing"], limit=1, data_dir=mt_data)
    d = t.docs()[0]
    a = [Generation("one", "stop"), Generation("two", "stop")]
    s = t.score(d, a + [Generation("Rating: [[4]]", "stop"), Generation("Rating: [[6]]", "stop")])
    assert s.metrics == {"score": 5.0, "score_turn1": 4.0, "score_turn2": 6.0, "consistency": 1.0, "unparseable": 0.0}
    s = t.score(d, a + [Generation("no idea", "stop"), Generation("Rating: [8]", "stop")])
    assert s.metrics == {"score": 8.0, "score_turn1": None, "score_turn2": 8.0, "consistency": None,
                         "unparseable": 0.5}
    assert s.extra["judgments"] == ["no idea", "Rating: [8]"] and s.extra["turns"] == ["one", "two"]


def test_bad_options(mt_data):
    with pytest.raises(ValueError, match="no category 'poetry'"):
        make_task("mt_bench", subjects=["poetry"], data_dir=mt_data)
    with pytest.raises(ValueError, match="--judge"):
        evaluate("no-such-model.gguf", "mt_bench", data_dir=mt_data)


def test_zero_shot_template_is_fastchats():
    from llmbench.tokenizer import Tokenizer

    render = Tokenizer.apply_chat_template
    msgs = [{"role": "user", "content": "Q1"}, {"role": "assistant", "content": "A1"}, {"role": "user", "content": "Q2"}]

    class T:                                             # only what apply_chat_template reads
        chat_template, bos_id, eos_id, hf = ZERO_SHOT_TEMPLATE, None, None, None

    assert render(T(), msgs) == (
        "A chat between a curious human and an artificial intelligence assistant. The assistant gives helpful, "
        "detailed, and polite answers to the human's questions.\n### Human: Q1\n### Assistant: A1\n### Human: Q2\n"
        "### Assistant:")
    assert render(T(), [{"role": "system", "content": "S"}, {"role": "user", "content": "Q"}]) == \
        "S\n### Human: Q\n### Assistant:"


# ---- end to end ----

def test_mt_bench_on_stories260k_judged_by_itself_with_resume(stories_path, mt_data, tmp_path):
    """`llmbench eval mt_bench --limit 2 --judge stories260K` over a category with references (reasoning) and
    one without (writing, sampled): the tiny judge writes stories, not ratings, and every unparseable rating
    is counted, never fatal; a run cut after one record resumes to the same records and numbers."""
    out = tmp_path / "run"
    args = [sys.executable, "-m", "llmbench", "eval", "mt_bench", "--model", str(stories_path), "--judge",
            str(stories_path), "--limit", "2", "--subjects", "reasoning,writing", "--threads", "2",
            "--data-dir", str(mt_data), "--out", str(out), "--json"]
    r = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    whole = json.loads(r.stdout)
    jsonschema.validate(whole, SCHEMA)
    t = whole["tasks"]["mt_bench"]
    assert whole["settings"]["zero_shot_chat_template"] == ["model", "judge"]
    assert whole["settings"]["judge"] == str(stories_path) and t["settings"]["judge_max_tokens"] == 1024
    recs = read_samples(out / "samples_mt_bench.jsonl")
    assert sorted((x["subject"], x["doc_id"]) for x in recs) == [("reasoning", 101), ("reasoning", 102),
                                                                  ("writing", 81), ("writing", 82)]
    unparseable = 0
    for x in recs:
        assert [q["kind"] for q in x["requests"]] == ["generate_until", "generate_until", "judge", "judge"]
        assert len(x["answers"]) == 4 and x["turns"] == [a["text"].strip() for a in x["answers"][:2]]
        assert x["judgments"] == [a["text"] for a in x["answers"][2:]]
        assert x["ratings"] == [parse_rating(j) for j in x["judgments"]]
        unparseable += sum(v is None for v in x["ratings"])
        assert x["metrics"]["unparseable"] == sum(v is None for v in x["ratings"]) / 2
        names = x["judge_prompts"]
        assert names == (["single-math-v1", "single-math-v1-multi-turn"] if x["subject"] == "reasoning"
                         else ["single-v1", "single-v1-multi-turn"])
    e = t["metrics"]["unparseable"]
    assert e["n"] == 4 and e["value"] * 8 == pytest.approx(unparseable)
    assert t["metrics"]["score"]["n"] == sum(1 for x in recs if any(v is not None for v in x["ratings"]))

    samples = out / "samples_mt_bench.jsonl"
    lines = samples.read_bytes().splitlines(keepends=True)
    samples.write_bytes(lines[0] + lines[1][: len(lines[1]) // 3])
    r = subprocess.run([sys.executable, "-m", "llmbench", "eval", "--resume", str(out), "--json"], cwd=ROOT,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)["tasks"]["mt_bench"]
    assert again["timing"]["docs_resumed"] == 1 and again["timing"]["docs_computed"] == 3
    assert again["metrics"] == t["metrics"]
    assert sorted(json.loads(x)["answers"] == y["answers"] for x, y in
                  zip(sorted(samples.read_bytes().splitlines(), key=lambda s: json.loads(s)["doc_id"]),
                      sorted(recs, key=lambda x: x["doc_id"]))) == [True] * 4


def test_mt_bench_through_openai_servers(mt_data, tmp_path):
    """The model on one server, the judge (NAME@URL) on another: the chat bodies each sends, the ratings read
    from the judge's text, and a 503 from the judge retried."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    with EvalServer() as model_srv, EvalServer() as judge_srv:
        model_srv.gen_text = "  Here is my answer. "
        judge_srv.gen_text = "A fair answer. Rating: [[6]]"
        judge_srv.faults = ["503"]
        res = evaluate(MODEL, "mt_bench", backend="openai", base_url=model_srv.base_url, limit=1,
                       subjects=["writing", "coding"], data_dir=mt_data, out=tmp_path,
                       judge=f"{MODEL}@{judge_srv.base_url}")
        asked = model_srv.bodies("/v1/chat/completions")
        assert len(asked) == 4 and all(b["max_tokens"] == 1024 for b in asked)
        assert sorted(b["temperature"] for b in asked) == [0.0, 0.0, 0.7, 0.7]
        second = [b for b in asked if len(b["messages"]) == 3]
        assert len(second) == 2 and all(b["messages"][1] == {"role": "assistant", "content": "Here is my answer."}
                                        for b in second)
        judged = judge_srv.bodies("/v1/chat/completions")     # 4 and the one answered 503
        assert len(judged) == 5 and all(b["temperature"] == 0.0 and b["max_tokens"] == 2048 for b in judged)
        assert all(b["messages"][0]["role"] == "system" and b["messages"][1]["role"] == "user" for b in judged)
        t = res["mt_bench"]
        assert t.metric("score") == 6.0 and t.metric("score_turn1") == 6.0 and t.metric("score_turn2") == 6.0
        assert t.metric("consistency") == 1.0 and t.metric("unparseable") == 0.0
        assert t.aggregate["subjects"]["coding"]["score"]["value"] == 6.0
        assert res.adapter_stats["judge"]["retries"] == 1
        assert res.environment["judge"]["base_url"] == judge_srv.base_url.rstrip("/") or \
            res.environment["judge"]["backend"] == "openai"


def test_judge_names():
    """--judge NAME@URL, a bare URL (the server's first listed model), or a GGUF path."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    from llmbench.eval import make_judge
    from llmbench.eval.openai_adapter import OpenAIAdapter

    with EvalServer() as srv:
        bare = make_judge(srv.base_url)
        named = make_judge(f"other@{srv.base_url}")
        assert isinstance(bare, OpenAIAdapter) and bare.model == MODEL
        assert isinstance(named, OpenAIAdapter) and named.model == "other"
        srv.models = []
        with pytest.raises(Exception, match="NAME@URL"):
            make_judge(srv.base_url)


def test_ratings_of_zero_and_one_get_a_normal_interval():
    """A rating is a mean, not a proportion, even where the judge only said [[0]] and [[1]]."""
    from llmbench.eval.metrics import aggregate

    recs = [{"subject": "writing", "metrics": {"score": v, "consistency": c}} for v, c in
            ((0.0, 1.0), (1.0, 0.0), (1.0, 1.0), (0.0, 1.0))]
    a = aggregate(recs, ["score", "consistency"], {}, "mt_bench", means=("score",))["metrics"]
    se = a["score"]["stderr"]
    assert a["score"]["ci95"] == pytest.approx([0.5 - 1.959963984540054 * se, 0.5 + 1.959963984540054 * se])
    assert a["consistency"]["ci95"][0] > 0.0 and a["consistency"]["ci95"][1] < 1.0 + 1e-12   # Wilson


# ---- answers kept apart from judgments (partial records) ----

# Fields a resumed multi-round task's results.json carries, each with a value of the wrong type.
WRONG_TYPES = [("timing", "rounds_resumed", "6"), ("timing", "rounds_recomputed", -1), ("timing", "notes", "a note"),
               ("timing", "notes", [3]), ("timing", "docs_failed", 1.5), ("timing", "errors", "HTTP 503"),
               ("timing", "docs_per_s", "fast"), ("timing", "requests", None), ("timing", "wall_s", -1.0)]


def _schema_holds(doc):
    """results.json ``doc`` passes the schema, and fails once any of its timing fields (`WRONG_TYPES`),
    its judge's name or its judge's environment has a value of the wrong type."""
    jsonschema.validate(doc, SCHEMA)
    name = next(iter(doc["tasks"]))
    assert {k for _, k, _ in WRONG_TYPES} <= set(doc["tasks"][name]["timing"])
    for where, key, bad in WRONG_TYPES + [("settings", "judge", 3), ("environment", "judge", "a judge")]:
        broken = copy.deepcopy(doc)
        node = broken["tasks"][name]["timing"] if where == "timing" else broken[where]
        node[key] = bad
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(broken, SCHEMA)

class Counting(Adapter):
    """The engine adapter, counting what it is asked."""

    def __init__(self, inner: Adapter):
        self.inner, self.asked = inner, []
        self.name, self.precision, self.answers_as_they_finish = inner.name, inner.precision, inner.answers_as_they_finish

    def answer(self, reqs, progress=None, on_answer=None):
        self.asked += list(reqs)
        return self.inner.answer(reqs, progress, on_answer)

    def loglikelihood(self, reqs):
        return self.inner.loglikelihood(reqs)

    def loglikelihood_rolling(self, reqs):
        return self.inner.loglikelihood_rolling(reqs)

    def generate_until(self, reqs):
        return self.inner.generate_until(reqs)

    def environment(self):
        return self.inner.environment()


def _same_records(a, b):
    key = lambda r: (r["subject"], r["doc_id"])  # noqa: E731
    strip = lambda r: {k: v for k, v in r.items() if k != "precision"}  # noqa: E731
    return [strip(r) for r in sorted(a, key=key)] == [strip(r) for r in sorted(b, key=key)]


def test_a_judge_failing_for_good_keeps_the_answers_and_resume_only_judges(stories_path, mt_data, tmp_path):
    """stories260K answers and judges two questions; a judge that fails every request leaves no final record
    but both turns in partial_mt_bench.jsonl; resuming with a working judge asks the model nothing and gives
    the uninterrupted run's records and numbers. A recorded turn whose request no longer matches what the
    task asks is asked again (that one only), with a note in timing."""
    from llmbench.eval.adapters import EngineAdapter
    from llmbench.eval.openai_adapter import OpenAIAdapter
    from llmbench.eval.runner import run_task
    from llmbench.eval.tasks.mt_bench import give_chat_template

    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    eng = EngineAdapter(stories_path, threads=2)
    give_chat_template(eng)
    task = make_task("mt_bench", limit=1, subjects=["reasoning", "writing"], data_dir=mt_data, judge_max_tokens=48)
    for d in ("whole", "run"):
        (tmp_path / d).mkdir()
    whole = run_task(task, eng, tmp_path / "whole", judge=eng)
    run = tmp_path / "run"
    with EvalServer() as srv:
        srv.faults = ["503"] * 4
        cut = run_task(task, eng, run, judge=OpenAIAdapter(srv.base_url, MODEL, retries=0, backoff=0.01))
    assert cut.timing["docs_failed"] == 2 and cut.records == [] and read_samples(run / "samples_mt_bench.jsonl") == []
    parts = read_samples(run / "partial_mt_bench.jsonl")
    assert sorted((p["doc_id"], p["round"]) for p in parts) == [(81, 1), (81, 2), (101, 1), (101, 2)]
    assert all(p["requests"][0]["kind"] == "generate_until" and len(p["answers"]) == 1 for p in parts)
    shutil.copytree(run, tmp_path / "run2")

    model = Counting(eng)
    again = run_task(task, model, run, resume=True, judge=eng)
    assert model.asked == []                                             # the judge only
    assert (again.timing["docs_computed"], again.timing["docs_failed"], again.timing["rounds_resumed"]) == (2, 0, 4)
    assert again.to_json()["metrics"] == whole.to_json()["metrics"] and _same_records(again.records, whole.records)

    p2 = tmp_path / "run2" / "partial_mt_bench.jsonl"
    lines = [json.loads(x) for x in p2.read_text().splitlines()]
    for x in lines:
        if (x["doc_id"], x["round"]) == (81, 2):
            x["requests"][0]["max_tokens"] = 1000                        # not what the task asks now
    p2.write_text("".join(json.dumps(x) + "\n" for x in lines))
    model = Counting(eng)
    again = run_task(task, model, tmp_path / "run2", resume=True, judge=eng)
    assert len(model.asked) == 1 and model.asked[0].max_tokens == 1024 and len(model.asked[0].context) == 3
    assert (again.timing["rounds_resumed"], again.timing["rounds_recomputed"]) == (3, 1)
    assert again.timing["notes"] == ["writing #81: round 2's recorded requests differ from what the task asks now; "
                                     "recomputed from round 2"]
    jsonschema.validate(json.loads(json.dumps(again.to_json())), SCHEMA["properties"]["tasks"]["additionalProperties"])
    assert again.to_json()["metrics"] == whole.to_json()["metrics"] and _same_records(again.records, whole.records)


def test_a_run_killed_in_the_judge_round_resumes_asking_the_judge_only(mt_data, tmp_path):
    """`llmbench eval mt_bench` through two test servers, killed while the judge (slow) has every judgment
    in flight: no final record yet, both turns of each question in partial_mt_bench.jsonl; `--resume`
    sends the model server nothing and ends with the uninterrupted run's numbers. `--resume --rejudge
    --judge OTHER` then grades the same answers with another judge, the model again asked nothing."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    out = tmp_path / "run"
    with EvalServer() as model_srv, EvalServer() as judge_srv:
        model_srv.gen_text = "  Here is my answer. "
        judge_srv.gen_text = "A fair answer. Rating: [[6]]"
        opts = dict(limit=1, subjects=["writing", "coding", "math"], data_dir=mt_data, judge=f"{MODEL}@{judge_srv.base_url}")
        whole = evaluate(MODEL, "mt_bench", backend="openai", base_url=model_srv.base_url, **opts)
        n_whole = len(model_srv.bodies("/v1/chat/completions"))
        judge_srv.delay_s = 30.0
        p = subprocess.Popen([sys.executable, "-m", "llmbench", "eval", "mt_bench", "--backend", "openai", "--base-url",
                              model_srv.base_url, "--model", MODEL, "--judge", opts["judge"], "--limit", "1",
                              "--subjects", "writing,coding,math", "--data-dir", str(mt_data), "--out", str(out)],
                             cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        partial = out / "partial_mt_bench.jsonl"
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(judge_srv.bodies("/v1/chat/completions")) < 12:
            time.sleep(0.02)                   # 6 judgments of the whole run, 6 of this one in flight
        p.send_signal(signal.SIGKILL)
        p.wait()
        assert len(judge_srv.bodies("/v1/chat/completions")) == 12, "the run should be killed in its judge round"
        assert read_samples(out / "samples_mt_bench.jsonl") == [] and len(read_samples(partial)) == 6
        asked = len(model_srv.bodies("/v1/chat/completions"))
        assert asked == 2 * n_whole
        judge_srv.delay_s = 0.0
        r = subprocess.run([sys.executable, "-m", "llmbench", "eval", "--resume", str(out), "--json"], cwd=ROOT,
                           capture_output=True, text=True, timeout=120)
        assert r.returncode == 0, r.stderr
        assert len(model_srv.bodies("/v1/chat/completions")) == asked     # the model was asked nothing
        assert len(judge_srv.bodies("/v1/chat/completions")) == 18
        t = json.loads(r.stdout)["tasks"]["mt_bench"]
        assert t["timing"]["docs_computed"] == 3 and t["timing"]["rounds_resumed"] == 6
        _schema_holds(json.loads((out / "results.json").read_text()))
        assert t["metrics"] == json.loads(json.dumps(whole["mt_bench"].to_json()))["metrics"]
        assert json.loads((out / "results.json").read_text())["tasks"]["mt_bench"]["metrics"] == t["metrics"]
        assert len(read_samples(out / "samples_mt_bench.jsonl")) == 3

        with EvalServer() as other:                  # the same answers graded by another judge
            other.gen_text = "Weak. Rating: [[3]]"
            again = [sys.executable, "-m", "llmbench", "eval", "--resume", str(out), "--judge",
                     f"{MODEL}@{other.base_url}", "--json"]
            r = subprocess.run(again, cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert r.returncode != 0 and "other settings (judge:" in r.stderr      # not without --rejudge
            r = subprocess.run(again + ["--rejudge"], cwd=ROOT, capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, r.stderr
            assert len(model_srv.bodies("/v1/chat/completions")) == asked and len(other.bodies("/v1/chat/completions")) == 6
    t = json.loads(r.stdout)["tasks"]["mt_bench"]
    assert t["metrics"]["score"]["value"] == 3.0 and t["timing"]["docs_computed"] == 3
    recs = read_samples(out / "samples_mt_bench.jsonl")
    assert len(recs) == 3 and all(x["ratings"] == [3.0, 3.0] for x in recs)
    assert json.loads((out / "run.json").read_text())["settings"]["judge"] == f"{MODEL}@{other.base_url}"

    recorded_env = json.loads((out / "results.json").read_text())["environment"]
    with EvalServer() as third:                      # the model's server is gone: nobody listens at its URL
        third.gen_text = "Good. Rating: [[8]]"
        r = subprocess.run([sys.executable, "-m", "llmbench", "eval", "--resume", str(out), "--rejudge", "--judge",
                            f"{MODEL}@{third.base_url}", "--json"], cwd=ROOT, capture_output=True, text=True,
                           timeout=120)
        assert r.returncode == 0, r.stderr
        assert len(third.bodies("/v1/chat/completions")) == 6
    doc = json.loads(r.stdout)
    assert doc["environment"]["model_loaded"] is False and "server_error" not in doc["environment"]
    assert {k: v for k, v in doc["environment"].items() if k not in ("judge", "model_loaded")} == \
        {k: v for k, v in recorded_env.items() if k not in ("judge", "model_loaded")}     # the run's own block
    assert doc["tasks"]["mt_bench"]["metrics"]["score"]["value"] == 8.0 and doc["adapter_stats"]["judge"]["requests"]


# ---- grading again without the model ----

def test_rejudge_with_the_model_file_gone_loads_no_model(stories_path, mt_data, tmp_path):
    """`llmbench eval --resume DIR --rejudge --judge J` after the model's GGUF file was deleted: every
    answer is recorded, so the model is not loaded; J grades the recorded turns (the same numbers as the
    run's own judge, J being that judge, greedy) and results.json names the recorded model, with
    model_loaded false. A run cut before one turn was answered: the rejudge says which answer is
    missing and that the model did not load; with the file back, the model answers that turn only."""
    model = tmp_path / "model.gguf"
    shutil.copy(stories_path, model)
    out = tmp_path / "run"
    cmd = [sys.executable, "-m", "llmbench", "eval"]
    r = subprocess.run(cmd + ["mt_bench", "--model", str(model), "--judge", str(stories_path), "--limit", "1",
                              "--subjects", "writing,math", "--threads", "2", "--data-dir", str(mt_data), "--out",
                              str(out), "--json"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    first = json.loads(r.stdout)
    turns = {x["doc_id"]: x["turns"] for x in read_samples(out / "samples_mt_bench.jsonl")}
    model.unlink()
    rejudge = cmd + ["--resume", str(out), "--rejudge", "--judge", str(stories_path), "--json"]
    r = subprocess.run(rejudge, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    again = json.loads(r.stdout)
    jsonschema.validate(again, SCHEMA)
    assert again["environment"]["model_loaded"] is False and again["environment"]["model"] == first["environment"]["model"]
    assert again["environment"]["judge"]["model"]["sha256"] == first["environment"]["judge"]["model"]["sha256"]
    t = again["tasks"]["mt_bench"]
    assert (t["timing"]["docs_computed"], t["timing"]["rounds_resumed"]) == (2, 4) and t["timing"]["notes"] == []
    assert t["metrics"] == first["tasks"]["mt_bench"]["metrics"]
    assert {x["doc_id"]: x["turns"] for x in read_samples(out / "samples_mt_bench.jsonl")} == turns
    assert json.loads((out / "results.json").read_text())["environment"]["model_loaded"] is False

    # cut before math #111's second turn was answered: no record, only its first turn
    for name, keep in (("samples_mt_bench.jsonl", lambda x: x["doc_id"] != 111),
                       ("partial_mt_bench.jsonl", lambda x: (x["doc_id"], x["round"]) != (111, 2))):
        f = out / name
        f.write_text("".join(json.dumps(x) + "\n" for x in read_samples(f) if keep(x)))
    r = subprocess.run(rejudge, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode != 0
    assert "lacks 1 of the model's answers (mt_bench math #111: round 2 not recorded)" in r.stderr
    assert "did not load" in r.stderr and "--model PATH" in r.stderr
    shutil.copy(stories_path, model)
    r = subprocess.run(rejudge, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr
    assert "math #111: rejudged, but round 2 was not recorded: the model answered it" in r.stderr
    done = json.loads(r.stdout)
    assert "model_loaded" not in done["environment"] and done["tasks"]["mt_bench"]["timing"]["rounds_resumed"] == 3
    assert done["tasks"]["mt_bench"]["metrics"] == first["tasks"]["mt_bench"]["metrics"]       # greedy: same turn
    assert {x["doc_id"]: x["turns"] for x in read_samples(out / "samples_mt_bench.jsonl")} == turns


# ---- a run against `llmbench serve`, killed after the first turn ----

def _serve(model, port: int, template, step_delay: float):
    """`llmbench serve MODEL` on ``port`` with FastChat's zero-shot chat template, once /health answers;
    a context of 4096 tokens holds a second turn after a first answer of 1024."""
    import httpx

    p = subprocess.Popen([sys.executable, "-m", "llmbench", "serve", str(model), "--port", str(port), "--threads",
                          "1", "--served-model-name", "stories", "--chat-template", str(template), "--step-delay",
                          str(step_delay), "--ctx", "4096"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while True:
        assert p.poll() is None, p.stderr.read() if p.stderr else ""
        try:
            if httpx.get(f"http://127.0.0.1:{port}/health").status_code == 200:
                return p
        except httpx.TransportError:
            pass
        assert time.monotonic() < deadline, "llmbench serve did not start"
        time.sleep(0.1)


def _finished(port: int) -> dict[str, float]:
    """The server's finished sequences by reason (its /metrics' vllm:request_success_total)."""
    import re

    import httpx

    text = httpx.get(f"http://127.0.0.1:{port}/metrics").text
    return {m.group(1): float(m.group(2)) for m in
            re.finditer(r'^vllm:request_success_total\{.*finished_reason="(\w+)"\} (\S+)$', text, re.M)}


def test_a_run_killed_after_the_first_turn_keeps_every_first_answer(stories_path, mt_data, tmp_path):
    """`llmbench eval mt_bench` against a live `llmbench serve` on stories260K (the judge a test server),
    killed once every first turn is answered and the second turns are decoding: each first answer the
    server finished is in partial_mt_bench.jsonl already (nothing waits for the judge round), no record
    yet; `--resume` asks the server for the second turns only and the records keep the recorded first
    answers."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer
    from test_serve import free_port

    template = tmp_path / "zero_shot.jinja"
    template.write_text(ZERO_SHOT_TEMPLATE)
    port = free_port()
    server = _serve(stories_path, port, template, step_delay=0.005)
    out = tmp_path / "run"
    partial = out / "partial_mt_bench.jsonl"
    try:
        with EvalServer() as judge_srv:
            judge_srv.gen_text = "Fair. Rating: [[5]]"
            args = [sys.executable, "-m", "llmbench", "eval", "mt_bench", "--backend", "openai", "--base-url",
                    f"http://127.0.0.1:{port}/v1", "--model", "stories", "--judge", f"{MODEL}@{judge_srv.base_url}",
                    "--limit", "1", "--subjects", "writing,math,reasoning", "--data-dir", str(mt_data), "--out",
                    str(out)]
            p = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 120
            while time.monotonic() < deadline and p.poll() is None and \
                    len(read_samples(partial) if partial.exists() else []) < 3:
                time.sleep(0.01)
            p.send_signal(signal.SIGKILL)              # every first turn recorded; the second ones in flight
            p.wait()
            parts = read_samples(partial)
            assert sorted((x["doc_id"], x["round"]) for x in parts) == [(81, 1), (101, 1), (111, 1)]
            assert read_samples(out / "samples_mt_bench.jsonl") == [] and judge_srv.bodies("/v1/chat/completions") == []
            time.sleep(0.5)                            # the server aborts the killed client's requests
            done = _finished(port)
            assert done.get("stop", 0) + done.get("length", 0) == 3   # finished there: the three first turns
            r = subprocess.run([sys.executable, "-m", "llmbench", "eval", "--resume", str(out), "--json"], cwd=ROOT,
                               capture_output=True, text=True, timeout=300)
            assert r.returncode == 0, r.stderr
            assert len(judge_srv.bodies("/v1/chat/completions")) == 6
        again = _finished(port)
        assert again.get("stop", 0) + again.get("length", 0) == 6         # the second turns only
    finally:
        server.kill()
        server.wait()
    t = json.loads(r.stdout)["tasks"]["mt_bench"]
    assert (t["timing"]["docs_computed"], t["timing"]["rounds_resumed"]) == (3, 3) and t["metrics"]["score"]["value"] == 5.0
    first = {x["doc_id"]: x["answers"][0]["text"] for x in parts}
    recs = read_samples(out / "samples_mt_bench.jsonl")
    assert {x["doc_id"]: x["answers"][0]["text"] for x in recs} == first
    assert all(len(x["answers"]) == 4 for x in recs)


def test_a_judgment_finished_beside_a_failed_one_is_kept(mt_data, tmp_path):
    """Two questions through two test servers; the judge fails one of the four judgments for good: the
    other judgment of that question is kept in a piece of its round (partial record with ``index``), so
    `--resume` asks the judge for the failed one only (the model nothing) and the record holds the kept
    rating beside the new one. `--rejudge` with another judge drops the old judge's piece and asks for
    all four."""
    sys.path.insert(0, str(ROOT / "tests"))
    from eval_server import MODEL, EvalServer

    from llmbench.eval.openai_adapter import OpenAIAdapter

    out = tmp_path / "run"
    opts = dict(limit=1, subjects=["writing", "math"], data_dir=mt_data, out=out)
    with EvalServer() as model_srv, EvalServer() as judge_srv:
        model_srv.gen_text = "My answer."
        judge_srv.gen_text = "Good. Rating: [[6]]"
        judge_srv.faults = ["503"]
        model = OpenAIAdapter(model_srv.base_url, MODEL)
        cut = evaluate(model, "mt_bench", judge=OpenAIAdapter(judge_srv.base_url, MODEL, retries=0), **opts)
        assert cut["mt_bench"].timing["docs_failed"] == 1 and len(cut["mt_bench"].records) == 1
        failed = next(d for d in (81, 111) if d not in [r["doc_id"] for r in cut["mt_bench"].records])
        pieces = [x for x in read_samples(out / "partial_mt_bench.jsonl") if "index" in x]
        mine = [x for x in pieces if x["doc_id"] == failed]
        assert len(mine) == 1 and mine[0]["round"] == 3 and [q["kind"] for q in mine[0]["requests"]] == ["judge"] * 2
        assert mine[0]["answers"][0]["text"] == "Good. Rating: [[6]]"
        shutil.copytree(out, tmp_path / "copy")
        asked = len(model_srv.bodies("/v1/chat/completions"))

        judge_srv.gen_text = "Weak. Rating: [[3]]"
        again = evaluate(model, "mt_bench", judge=OpenAIAdapter(judge_srv.base_url, MODEL), resume=True, **opts)
        t = again["mt_bench"]
        assert len(model_srv.bodies("/v1/chat/completions")) == asked and len(judge_srv.bodies("/v1/chat/completions")) == 5
        assert (t.timing["docs_computed"], t.timing["answers_resumed"], t.timing["rounds_resumed"]) == (1, 1, 2)
        rec = next(r for r in read_samples(out / "samples_mt_bench.jsonl") if r["doc_id"] == failed)
        assert sorted(rec["ratings"]) == [3.0, 6.0] and mine[0]["index"] == [rec["ratings"].index(6.0)]
        jsonschema.validate(json.loads((out / "results.json").read_text()), SCHEMA)

        with EvalServer() as other:
            other.gen_text = "Fine. Rating: [[8]]"
            r = evaluate(model, "mt_bench", judge=OpenAIAdapter(other.base_url, MODEL), resume=True, rejudge=True,
                         **{**opts, "out": tmp_path / "copy"})
            assert len(other.bodies("/v1/chat/completions")) == 4
    assert len(model_srv.bodies("/v1/chat/completions")) == asked
    assert [x["ratings"] for x in read_samples(tmp_path / "copy" / "samples_mt_bench.jsonl")] == [[8.0, 8.0]] * 2
    assert r["mt_bench"].timing["answers_resumed"] == 0
    left = [x["answers"][0]["text"] for x in read_samples(tmp_path / "copy" / "partial_mt_bench.jsonl") if "index" in x]
    assert left and set(left) == {"Fine. Rating: [[8]]"}              # the new judge's pieces only
