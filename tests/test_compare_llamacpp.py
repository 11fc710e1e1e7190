"""benchmarks/compare_llamacpp.py: the llmbench side of the comparison runs for real on stories260K and
reports the prompt's operation counts; the summary's medians, ratios, fractions of peak and ceiling are
checked against figures worked out by hand; bad arguments and a missing llama.cpp get clear errors."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"
sys.path.insert(0, str(BENCH))
import compare_llamacpp as cmp  # noqa: E402 - the benchmarks folder is put on the path just above

from llmbench import LLM  # noqa: E402
from llmbench.models.gguf import GGUFFile  # noqa: E402


def test_llmbench_side_runs(stories_path):
    r = cmp.measure(sys.executable, cmp.LLMBENCH, [str(stories_path), "1", "16", "4", "2", str(BENCH), "q8"])
    assert len(r["pp"]) == 2 and len(r["tg"]) == 2 and all(v > 0 for v in r["pp"] + r["tg"])
    assert set(r["ops"]) == {"f32"} and r["ops"]["f32"] > 0   # stories260K's weights are float
    # a step reads every weight matrix but the embedding (stories260K has its own output matrix) and
    # the KV cache at the tg test's mean depth, 1 + 4 // 2 tokens
    read = sum(t.nbytes for name, t in GGUFFile(stories_path).tensors.items()
               if len(t.shape) == 2 and name != "token_embd.weight")
    assert r["step_bytes"] == read + 3 * LLM(str(stories_path)).memory()["kv_per_token"]


def test_llmbench_side_with_bf16_pairs(stories_path):
    """MODEL@bf16 runs LLM(activations="bf16"): the float matrices whose rows are a multiple of 32 values
    (all of stories260K's but ffn_down, 172 wide) count as BF16 pair products and read 2 bytes a value."""
    from bench_engine import split_spec

    assert split_spec("llama-125m:F16@bf16") == ("llama-125m:F16", "bf16")
    assert split_spec("a/b@c.gguf") == ("a/b@c.gguf", "q8") and split_spec("x.gguf") == ("x.gguf", "q8")
    r = cmp.measure(sys.executable, cmp.LLMBENCH, [str(stories_path), "1", "16", "4", "1", str(BENCH), "bf16"])
    q8 = cmp.measure(sys.executable, cmp.LLMBENCH, [str(stories_path), "1", "16", "4", "1", str(BENCH), "q8"])
    tensors = GGUFFile(stories_path).tensors
    down = sum(2.0 * t.n_elements * 16 for n, t in tensors.items() if n.endswith("ffn_down.weight"))
    assert set(r["ops"]) == {"f32", "bf16"} and r["ops"]["f32"] == pytest.approx(q8["ops"]["f32"] - r["ops"]["bf16"])
    assert r["ops"]["f32"] > down   # ffn_down and attention stay on FP32
    halved = sum(t.nbytes // 2 for n, t in tensors.items()
                 if len(t.shape) == 2 and n != "token_embd.weight" and t.shape[-1] % 32 == 0)
    assert r["step_bytes"] == q8["step_bytes"] - halved


def test_summary_by_hand():
    ours = [{"pp": [100.0, 120.0], "tg": [10.0, 12.0], "ops": {"f32": 2e9, "int8": 4e9}}, {"pp": [110.0], "tg": [11.0]}]
    theirs = [{"pp": [50.0, 70.0, 60.0], "tg": [9.0, 10.0, 11.0]}]
    s = cmp.summarize(ours, theirs, 512, {"f32": 100.0, "int8": 400.0})
    assert s["llmbench"] == {"pp": 110.0, "tg": 11.0} and s["llama.cpp"] == {"pp": 60.0, "tg": 10.0}
    assert s["ratio"]["pp"] == pytest.approx(110 / 60) and s["ratio"]["tg"] == pytest.approx(1.1)
    at_peak = 2e9 / 100e9 + 4e9 / 400e9   # 0.03 s: the prompt at the peaks
    assert s["pp_of_peak"]["llmbench"] == pytest.approx(at_peak / (512 / 110))
    assert s["pp_of_peak"]["llama.cpp"] == pytest.approx(at_peak / (512 / 60))
    assert s["pp_ceiling"] == pytest.approx((512 / 60) / at_peak)
    assert "tg_of_bandwidth" not in s   # no bandwidth given
    # one round each side to pair: its medians' ratio (110 / 60, 11 / 10) is the whole range
    assert s["ratio_range"]["pp"] == pytest.approx((110 / 60, 110 / 60)) and s["ratio_range"]["tg"] == pytest.approx((1.1, 1.1))
    two = cmp.summarize(ours, theirs + [{"pp": [100.0], "tg": [5.0]}], 512, {"f32": 100.0, "int8": 400.0})
    assert two["ratio_range"]["pp"] == pytest.approx((1.1, 110 / 60)) and two["ratio_range"]["tg"] == pytest.approx((1.1, 2.2))
    ours[0]["step_bytes"] = 2e9
    s = cmp.summarize(ours, theirs, 512, {"f32": 100.0, "int8": 400.0}, read_gbs=40.0)
    assert s["tg_of_bandwidth"]["llmbench"] == pytest.approx(2 * 11 / 40)
    assert s["tg_of_bandwidth"]["llama.cpp"] == pytest.approx(2 * 10 / 40)
    assert s["tg_ceiling"] == pytest.approx(40 / 20)
    assert "tg_of_near_bandwidth" not in s
    # each round's tg median against that round's own probes, then the median over rounds
    s = cmp.summarize(ours, theirs, 512, {"f32": 100.0, "int8": 400.0}, read_gbs=40.0,
                      near_gbs={"llmbench": [40.0, 20.0], "llama.cpp": [25.0]})
    assert s["tg_of_near_bandwidth"]["llmbench"] == pytest.approx((2 * 11 / 40 + 2 * 11 / 20) / 2)
    assert s["tg_of_near_bandwidth"]["llama.cpp"] == pytest.approx(2 * 10 / 25)
    assert s["tg_of_bandwidth"]["llmbench"] == pytest.approx(2 * 11 / 40)   # the best probe's, as before
    # the tg ratio at equal bandwidth: per round pair, each engine's tg against its own probes (one pair here)
    assert s["tg_ratio_near"] == pytest.approx((11 / 40) / (10 / 25))
    two = cmp.summarize(ours, theirs + [{"pp": [100.0], "tg": [5.0]}], 512, {"f32": 100.0, "int8": 400.0},
                        near_gbs={"llmbench": [40.0, 20.0], "llama.cpp": [25.0, 50.0]})
    assert two["tg_ratio_near"] == pytest.approx(((11 / 40) / (10 / 25) + (11 / 20) / (5 / 50)) / 2)
    assert cmp.ik_cells(two) == " 65 / 9.5 | 1.69 / 1.16 (3.09) | 1.10–1.83; 1.10–2.20 |"


def test_bad_arguments(capsys):
    with pytest.raises(SystemExit):
        cmp.main(["--threads", "0"])
    assert "--threads must be at least 1" in capsys.readouterr().err


def test_missing_llama_cpp_says_what_to_install(stories_path):
    try:
        import llama_cpp  # noqa: F401
        pytest.skip("llama_cpp is installed here")
    except ImportError:
        pass
    with pytest.raises(RuntimeError, match="llama-cpp-python"):
        cmp.measure(sys.executable, cmp.LLAMACPP, [str(stories_path), "1", "16", "4", "1"])


def test_types_cross_models(stories_path, tmp_path):
    """--types: a preset takes each mix by name (its own type replaced, the activations kept), a file is
    converted with llmbench quantize; an unknown mix is refused before anything is built."""
    from bench_engine import split_spec

    out = cmp.with_types(["llama-125m:F16@bf16", str(stories_path)], ["q4_0", "Q8_0"], str(tmp_path), split_spec)
    assert out[:2] == ["llama-125m:Q4_0@bf16", "llama-125m:Q8_0@bf16"]
    for path, t in zip(out[2:], ("Q4_0", "Q8_0")):
        assert path.startswith(str(tmp_path)) and path.endswith(f".{t}.gguf")
        types = {x.type for x in GGUFFile(path).tensors.values()}
        assert t in types and types <= {t, "F32", "F16", "Q6_K", "Q8_0"}, types
    assert cmp.with_types(["x.gguf"], [], str(tmp_path), split_spec) == ["x.gguf"]
    with pytest.raises(ValueError, match="unknown mix 'Q9'"):
        cmp.with_types(["llama-125m"], ["Q9"], str(tmp_path), split_spec)
    with pytest.raises(FileNotFoundError, match="no such GGUF file"):
        cmp.with_types(["missing.gguf"], ["Q4_0"], str(tmp_path), split_spec)


LLAMA_BENCH_JSON = """[
  {
    "build_commit": "8337e4cd", "model_filename": "m.gguf", "n_threads": 2, "n_prompt": 512, "n_gen": 0,
    "avg_ts": 1500.5, "samples_ns": [ 340000000, 341000000 ],
    "samples_ts": [ 1505.88, 1501.47 ]
  },
  {
    "build_commit": "8337e4cd", "model_filename": "m.gguf", "n_threads": 2, "n_prompt": 0, "n_gen": 64,
    "avg_ts": 300.0, "samples_ns": [ 213000000, 214000000 ],
    "samples_ts": [ 300.47, 299.07 ]
  }
]
"""


def test_llama_bench_report_parsed():
    """ik_llama.cpp's llama-bench -o json: each test's per-run tokens/s, by test kind; a report with
    another size or without one of the two tests is refused, naming what it holds."""
    assert cmp.parse_llama_bench(LLAMA_BENCH_JSON, 512, 64) == {"pp": [1505.88, 1501.47], "tg": [300.47, 299.07]}
    with pytest.raises(ValueError, match="test of 512 prompt and 0 generated tokens; asked for pp256 and tg64"):
        cmp.parse_llama_bench(LLAMA_BENCH_JSON, 256, 64)
    import json
    only_pp = json.dumps(json.loads(LLAMA_BENCH_JSON)[:1])
    with pytest.raises(ValueError, match="lacks the tg test"):
        cmp.parse_llama_bench(only_pp, 512, 64)


def test_ik_bench_missing_binary(tmp_path, stories_path):
    with pytest.raises(RuntimeError, match="not an executable; build ik_llama.cpp's llama-bench"):
        cmp.measure_ik(str(tmp_path / "llama-bench"), [str(stories_path), "1", "16", "4", "1"])
    # a binary that fails: its stderr is shown
    fake = tmp_path / "fails"
    fake.write_text("#!/bin/sh\necho 'error: failed to load model' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(RuntimeError, match="failed to load model"):
        cmp.measure_ik(str(fake), [str(stories_path), "1", "16", "4", "1"])


def test_bench_engine_near_fractions(stories_path, tmp_path, capsys):
    """bench_engine --near N: N tg runs a row, each between two bandwidth probes in the process, recorded
    as fractions of the probes around them and printed as their median and range."""
    import json

    import bench_engine

    out = tmp_path / "rows.json"
    assert bench_engine.main(["--model", str(stories_path), "--threads", "1", "--pp", "16", "--tg", "4", "--reps", "1",
                              "--warmup", "0", "--near", "2", "--json", str(out)]) == 0
    (row,) = json.loads(out.read_text())
    assert len(row["near_fractions"]) == 2 and all(0 < f < 1e3 for f in row["near_fractions"])
    assert "of the probes around each of 2 tg4 runs" in capsys.readouterr().out
    bench_engine.main(["--model", str(stories_path), "--threads", "1", "--pp", "16", "--tg", "4", "--reps", "1",
                       "--warmup", "0", "--json", str(out)])
    assert "near_fractions" not in json.loads(out.read_text())[0]


def test_bench_engine_near_refuses_a_negative_count(capsys):
    import bench_engine

    with pytest.raises(SystemExit):
        bench_engine.main(["--near", "-1"])
    assert "--near takes a number of runs, 0 or more (got -1)" in capsys.readouterr().err
