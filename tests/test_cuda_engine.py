"""The engine on the CUDA backend, LLM(backend="cuda"), against the same engine on the CPU: the same
scheduler, block tables and sampler, with the forward pass of csrc/backend_cuda.c on the device.

On a GPU these run there. Without one they skip with the reason, and tests/test_cuda_emulated.py
runs this file against the emulated device (kernels/*.cu compiled for the CPU), where sequences are
shorter: the emulation runs each GPU thread as a fiber.

Tolerances. The CPU reference runs activations="f32": float products against the same weights
dequantized, so the two differ only in the device's arithmetic, whose error sources are:
  - sums in another order (matvec, attention; SGEMM for F32 weights): float32 rounding, ~1e-6;
  - FP16: cuBLAS GEMM of prompt tokens against 16-bit weights rounds activations to FP16 (unit
    roundoff 2^-11 = 4.9e-4 per element, FP32 accumulation), and an F16 KV cache rounds K and V
    that already differ in their last float bits, so the two caches round some values apart;
  - a Q8_0 KV cache: the same, with 8-bit steps (1/127 of a block's largest value).
Measured in emulation, max |logit - cpu| / max |cpu|: F32 weights and KV 1.0e-6; with FP16 (16-bit
weights or KV) 1.2e-4 (stories260K) to 7.9e-4 (tiny preset, rows of 256 and 768; Q4_K_M 6.8e-4, the
legacy, IQ4 and Q2_K/Q3_K types 6.2-7.9e-4); Q8_0 KV 3.7e-3.
Decode steps (FP32 matvec over the cache the prompt left) then differ in the sampled token's
log-probability by 8.6e-6, up to 4.9e-4 and 1.0e-3 respectively. The bounds in TOL are 4-10x those.
Where both sides pick tokens greedily they must be the same tokens (the fixed prompts here have
clear leaders)."""


from __future__ import annotations

import numpy as np
import pytest
from models import with_tensor_replaced

import llmbench
from llmbench import LLM, SamplingParams
from llmbench.backends import cuda

HAVE_GPU, WHY = cuda.available()
gpu = pytest.mark.skipif(not HAVE_GPU, reason=f"no usable CUDA device: {WHY}")
no_gpu = pytest.mark.skipif(HAVE_GPU, reason="a CUDA device is present")
EMULATED = HAVE_GPU and cuda.devices()[0].name == "llmbench host emulation"

# (max |logit - cpu| / max |cpu|, max |log-probability - cpu| of a decoded token) by error source
TOL = {"f32": (1e-5, 1e-4), "fp16": (3e-3, 2e-3), "q8_0": (1.5e-2, 5e-3)}


def tol(wtype: str, kv: str) -> tuple[float, float]:
    if kv == "q8_0":
        return TOL["q8_0"]
    return TOL["f32"] if wtype == "F32" and kv == "f32" else TOL["fp16"]


def rel_err(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got - want).max() / np.abs(want).max())


def lp_err(a, b) -> float:
    return float(np.abs(np.array(a.logprobs) - np.array(b.logprobs)).max())


@pytest.fixture(scope="module")
def stories_pair(stories_path):
    kw = {"kv_dtype": "f32", "max_seqs": 64, "tokenizer_options": {"remove_extra_whitespaces": True}}
    return LLM(stories_path, threads=2, **kw), LLM(stories_path, backend="cuda", **kw)


@no_gpu
def test_cuda_backend_unavailable_says_why(stories_path):
    with pytest.raises(llmbench.BackendUnavailableError) as e:
        LLM(stories_path, backend="cuda")
    assert str(e.value) == WHY


@gpu
def test_greedy_story_identical_to_cpu(stories_pair):
    cpu, dev = stories_pair
    assert dev.backend == "cuda" and cpu.backend == "cpu"
    n = 48 if EMULATED else 256
    params = SamplingParams(temperature=0, max_tokens=n, ignore_eos=True)
    want, got = cpu.generate("", params)[0], dev.generate("", params)[0]
    assert got.text.startswith("Once upon a time, there was a little girl named Lily.")
    assert got.token_ids == want.token_ids
    assert lp_err(got, want) <= tol("F32", "f32")[1]


@gpu
@pytest.mark.parametrize("kv", ["f32", "f16"])
def test_stories_logits_match_cpu(stories_path, kv):
    toks = [1, 403, 407, 261, 378, 11, 350, 365, 263, 410, 485, 13, 13, 444]
    want = LLM(stories_path, threads=2, kv_dtype=kv).logits(toks)
    got = LLM(stories_path, backend="cuda", kv_dtype=kv).logits(toks)
    assert got.shape == want.shape and got.dtype == np.float32
    assert rel_err(got, want) <= tol("F32", kv)[0]   # stories260K's weights are F32
    assert (got.argmax(1) == want.argmax(1)).all()


# every weight type with the default KV cache; the other KV types once (their kernels have their own
# tests in test_cuda_kernels.py)
DUMMY_CASES = [("F32", "f16"), ("F16", "f16"), ("Q8_0", "f16"), ("Q4_1", "f16"), ("Q5_0", "f16"), ("Q5_1", "f16"),
               ("IQ4_NL", "f16"), ("IQ4_XS", "f16"), ("Q2_K", "f16"), ("Q3_K_M", "f16"),
               ("Q4_K_M", "f16"), ("Q4_K_M", "f32"), ("Q4_K_M", "q8_0")]


@gpu
@pytest.mark.parametrize("wtype,kv", DUMMY_CASES)
def test_dummy_logits_match_cpu(wtype, kv):
    """Prefill logits of every position (GEMM path), then greedy decode steps (matvec path)."""
    path = llmbench.dummy_model("tiny", wtype)
    toks = np.random.default_rng(1).integers(0, 1024, 37).tolist()
    cpu = LLM(path, threads=2, kv_dtype=kv, activations="f32")
    dev = LLM(path, backend="cuda", kv_dtype=kv)
    want, got = cpu.logits(toks), dev.logits(toks)
    rel, lp = tol(wtype, kv)
    assert rel_err(got, want) <= rel
    params = SamplingParams(temperature=0, max_tokens=4, ignore_eos=True)
    a, b = cpu.generate([toks], params)[0], dev.generate([toks], params)[0]
    assert a.token_ids == b.token_ids
    assert lp_err(a, b) <= lp


@gpu
@pytest.mark.parametrize("preset", ["tiny-llama3", "tiny-qwen2"])
def test_layouts_match_cpu(preset):
    """Llama 3.2's tied output and rope frequency factors; Qwen2's QKV biases and NeoX RoPE."""
    path = llmbench.dummy_model(preset, "Q4_K_M")
    toks = np.random.default_rng(3).integers(0, 1024, 29).tolist()
    want = LLM(path, threads=2, kv_dtype="f32", activations="f32").logits(toks)
    got = LLM(path, backend="cuda", kv_dtype="f32").logits(toks)
    assert rel_err(got, want) <= tol("Q4_K_M", "f32")[0]


@gpu
def test_batch_invariance(stories_pair):
    """A sequence's sampled tokens, log-probabilities and top log-probabilities are identical alone
    and inside a batch of 64 (decode steps of 64 sequences: four matvec calls of 16 per weight)."""
    _, dev = stories_pair
    n, longest = (3, 16) if EMULATED else (24, 60)   # emulated: shorter, the same batch of 64
    rng = np.random.default_rng(2)
    target = [1, *rng.integers(3, 512, 20).tolist()]
    others = [[1, *rng.integers(3, 512, int(k)).tolist()] for k in rng.integers(1, longest, 63)]
    params = SamplingParams(temperature=0.9, top_k=40, seed=7, max_tokens=n, logprobs=2, ignore_eos=True)
    alone = dev.generate([target], params)[0]
    batch = dev.generate([*others[:31], target, *others[31:]], params)[31]
    assert len(alone.token_ids) == n
    assert alone.token_ids == batch.token_ids
    assert alone.logprobs == batch.logprobs and alone.top_logprobs == batch.top_logprobs


@gpu
def test_prefix_fork_equals_full_computation(stories_pair):
    """Forks share the prefix's KV blocks and copy its partial block on the device (kv_copy)."""
    cpu, dev = stories_pair
    ctx = dev.tokenize("Once upon a time, there was a little girl")
    assert len(ctx) % dev.block_size  # the shared prefix ends inside a block: the fork copies it
    conts = [dev.tokenize(c, add_bos=False) for c in (" named Lily", " who", " and a dog", " named Lily.")]
    reqs = [(ctx + c, len(ctx)) for c in conts]
    shared = dev.score_tokens(reqs)
    alone = [dev.score_tokens([r])[0] for r in reqs]
    assert shared == alone
    want = cpu.score_tokens(reqs)
    assert [g for _, g in shared] == [g for _, g in want] and shared[0][1] is True
    assert np.allclose([lp for lp, _ in shared], [lp for lp, _ in want], atol=1e-3)
    free = dev.memory()["free_blocks"]
    params = SamplingParams(temperature=0, max_tokens=5, ignore_eos=True, logprobs=1)
    with dev.hold_prefix(ctx) as prefix:
        forked = dev.generate([" named", " who"], params, prefix=prefix)
    whole = dev.generate([ctx + dev.tokenize(" named", add_bos=False), ctx + dev.tokenize(" who", add_bos=False)],
                         params)
    for f, w in zip(forked, whole):
        assert f.token_ids == w.token_ids and f.logprobs == w.logprobs
    assert dev.memory()["free_blocks"] == free


@gpu
def test_cuda_graphs_give_identical_tokens(stories_path):
    """Decode steps replayed from CUDA Graphs (3 sequences: the bucket of 4, one padding row; then 2
    and 1 as they finish) give the tokens and log-probabilities of launching every kernel."""
    prompts = ["", "Lily", "Once upon a time there"]
    runs = {}
    for graphs in (True, False):
        llm = LLM(stories_path, backend="cuda", kv_dtype="f16", cuda_graphs=graphs)
        params = [SamplingParams(temperature=0.8, top_k=20, seed=3, max_tokens=n, logprobs=1, ignore_eos=True)
                  for n in (4, 6, 8)]
        runs[graphs] = ([llm.generate([p], q)[0] for p, q in zip(prompts, params)] +
                        llm.generate(prompts, params[2]), llm.engine.stats())
    (on, st_on), (off, st_off) = runs[True], runs[False]
    for a, b in zip(on, off):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert 1 <= st_on["graph_captures"] <= 3 and st_on["graph_replays"] >= 15 and st_on["kernels_per_step"] > 0
    assert st_off["graph_captures"] == st_off["graph_replays"] == 0
    # and both are right, not merely equal: greedy tokens of the replayed batch are the CPU engine's
    greedy = SamplingParams(temperature=0, max_tokens=8, ignore_eos=True)
    dev = LLM(stories_path, backend="cuda", kv_dtype="f16", cuda_graphs=True).generate(prompts, greedy)
    cpu = LLM(stories_path, threads=1, kv_dtype="f16").generate(prompts, greedy)
    assert [d.token_ids for d in dev] == [c.token_ids for c in cpu]


@gpu
def test_cuda_graphs_past_one_attention_split(stories_path):
    """A context longer than one decode-attention split (512 keys): a graph's attention grid is sized
    for the whole context (3 splits for ctx 1100; each block reads its sequence's real length on the
    device), direct launches for the longest sequence of the step (1 split up to 512 keys, then 2), yet
    tokens and log-probabilities are the same: a split past a sequence's end weighs nothing. Two
    sequences: one crosses the first split's end after the graph was captured (keys 511..517), one
    is short (all but one of its splits empty)."""
    long_prompt = np.random.default_rng(5).integers(3, 512, 510).tolist()
    prompts = [long_prompt, [1, 403, 407, 261]]
    params = SamplingParams(temperature=0.8, top_k=40, seed=7, max_tokens=8, logprobs=1, ignore_eos=True)
    runs = {}
    for graphs in (True, False):
        llm = LLM(stories_path, backend="cuda", kv_dtype="f32", ctx=1100, cuda_graphs=graphs)
        runs[graphs] = (llm.generate(prompts, params), llm.engine.stats())
    (on, st_on), (off, st_off) = runs[True], runs[False]
    for a, b in zip(on, off):
        assert a.token_ids == b.token_ids and a.logprobs == b.logprobs
    assert 1 <= st_on["graph_captures"] <= 2 and st_on["graph_replays"] >= 5 and st_off["graph_replays"] == 0


@gpu
def test_device_sampling_matches_host_sampling(stories_pair):
    """Steps whose every request samples plainly sample on the device (only ids cross the bus): greedy
    tokens are the CPU engine's; seeded temperature sampling draws the same tokens as sampling the
    same logits on the host."""
    cpu, dev = stories_pair
    prompts = ["Lily", "Once upon a time there was"]
    greedy = SamplingParams(temperature=0, max_tokens=10, ignore_eos=True)
    before = dev.engine.stats()["device_sampled_rows"]
    got = dev.generate(prompts, greedy)
    assert dev.engine.stats()["device_sampled_rows"] == before + 20
    assert [o.token_ids for o in got] == [o.token_ids for o in cpu.generate(prompts, greedy)]
    hot = SamplingParams(temperature=1.0, top_p=0.9, min_p=0.02, seed=11, max_tokens=10, ignore_eos=True)
    host = LLM(dev.path, backend="cuda", kv_dtype="f32", device_sampling=False)
    a, b = dev.generate(prompts, hot), host.generate(prompts, hot)
    assert host.engine.stats()["device_sampled_rows"] == 0
    assert [o.token_ids for o in a] == [o.token_ids for o in b]
    assert np.abs(np.array([o.logprobs for o in a]) - np.array([o.logprobs for o in b])).max() <= 1e-4


@gpu
def test_memory_is_reported(stories_pair):
    _, dev = stories_pair
    m = dev.memory()
    assert m["weights"] >= sum(t.nbytes for t in dev.file.tensors.values() if len(t.shape) == 2) - 512 * 64 * 4
    assert m["kv_cache"] == dev.kv_blocks * dev.block_size * m["kv_per_token"]
    assert m["scratch"] > 0 and m["peak"] >= m["weights"] + m["kv_cache"] + m["scratch"] - 1
    assert 0 < m["device_free"] < m["device_total"]


@gpu
def test_out_of_device_memory_is_clear_and_recoverable(stories_path):
    free, _ = cuda.mem_info()
    with pytest.raises(llmbench.DeviceOutOfMemoryError) as e:
        LLM(stories_path, backend="cuda", kv_dtype="f32", kv_budget=2 * free)
    msg = str(e.value)
    assert "KV cache" in msg and "asked for" in msg and "free" in msg and "backend_cuda" not in msg
    # nothing leaked: the same memory is free again, and an engine runs
    assert cuda.mem_info()[0] >= free - (1 << 20)
    toks = [1, 403, 407, 261]
    got = LLM(stories_path, backend="cuda", kv_dtype="f32").logits(toks)
    assert rel_err(got, LLM(stories_path, threads=1, kv_dtype="f32").logits(toks)) <= tol("F32", "f32")[0]


@gpu
def test_bench_backend_cuda(stories_path):
    """`llmbench bench --backend cuda`: the same pp/tg/latency measurement, with device time per
    phase beside wall time, CUDA Graph counters, device memory, and decode bandwidth as a fraction
    of the device's copy bandwidth measured in the same run; the result follows the schema."""
    from llmbench.perf.bench import BenchConfig, run

    cfg = BenchConfig(model=str(stories_path), backend="cuda", pp=8, tg=4, batch=2, input_len=4, output_len=3,
                      warmup=0, repetitions=1, kv_dtype="f32")
    r = run(cfg)   # validated against the schema inside
    env = r["environment"]
    assert env["backend"] == "cuda" and env["gpu_name"] == cuda.devices()[0].name and env["cuda_graphs"] is True
    assert [p["test"] for p in r["cuda"]["phases"]] == ["pp8", "tg4", "latency b2"]
    pp, tg = r["cuda"]["phases"][:2]
    assert pp["prefill_device_s"] > 0 and pp["decode_wall_s"] == 0
    assert 0 < tg["decode_device_s"] <= tg["decode_wall_s"] and tg["steps"] == 4
    g = r["cuda"]["graphs"]
    assert g["requested"] and g["captures"] >= 1 and g["replays"] >= 3 and g["kernels_per_step"] > 0
    m = r["memory"]
    assert m["gpu_total_bytes"] > m["gpu_free_bytes"] > 0
    assert m["gpu_peak_bytes"] >= m["weights_bytes"] + m["kv_cache_bytes"]
    bw = r["config"]["membw"]
    assert bw["backend"] == "cuda" and r["bandwidth"]["measured_gbps"] == bw["copy_gbs"] > 0
    off = run(BenchConfig(**{**cfg.__dict__, "cuda_graphs": False, "batch": 0, "pp": 0}))
    assert off["environment"]["cuda_graphs"] is False and off["cuda"]["graphs"]["replays"] == 0


@no_gpu
def test_bench_backend_cuda_says_why_without_a_device(stories_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "-m", "llmbench", "bench", "--backend", "cuda", "--model", str(stories_path),
                        "--pp", "8", "--tg", "0", "--batch", "0"], capture_output=True, text=True, timeout=300,
                       check=False)
    assert r.returncode == 2 and "error:" in r.stderr and "Traceback" not in r.stderr
    assert WHY.split(":")[0] in r.stderr


@gpu
@pytest.mark.parametrize("type_name", ["IQ2_XXS", "IQ3_S", "IQ1_M", "TQ2_0", "MXFP4", "NVFP4", "Q1_0"])
def test_weight_type_without_a_cuda_kernel_is_named(tmp_path, type_name):
    """A type the CPU engine runs but the device has no kernel for (tests/lowbit.py writes them) raises,
    naming tensor and type."""
    gguf = pytest.importorskip("gguf")
    from lowbit import QUANTIZERS

    src = llmbench.dummy_model("tiny", "F32")
    up = next(t for t in gguf.GGUFReader(src).tensors if t.name == "blk.1.ffn_up.weight")
    path = with_tensor_replaced(src, tmp_path / "lb.gguf", up.name, QUANTIZERS[type_name](np.asarray(up.data, np.float32)),
                                gguf.GGMLQuantizationType[type_name])
    assert LLM(path, threads=1).logits([1, 2, 3]).shape == (3, 1024)   # the CPU runs it
    with pytest.raises(llmbench.UnsupportedError, match=rf"blk\.1\.ffn_up\.weight is {type_name}.*no CUDA kernel"):
        LLM(path, backend="cuda")
