#!/usr/bin/env bash
# gpu_check.sh — the CUDA backend's checks on a GPU machine, in one run of about six minutes: build the
# C extension for that machine's Python (the CUDA library itself is carried, built on the dev machine
# with LLMBENCH_CUDA_ARCH=90; it is rebuilt here only if missing), run tests/test_cuda*.py (kernels,
# and the engine on the device against the CPU engine: tests/test_cuda_engine.py), the kernel
# benchmark benchmarks/bench_cuda.py --quick, then `llmbench bench --backend cuda` on the llama-1b
# preset in F16, Q8_0 and Q4_K_M (pp512, tg128, a latency run of 8 requests; device time per phase,
# CUDA Graph counters, device memory, decode bandwidth against the device's copy bandwidth), and
# benchmarks/bench_cuda_graphs.py: decode tokens/s with CUDA Graphs on and off, alternated, at batch
# 1, 8 and 64 of llama-1b Q4_K_M, with capture time and kernels per step (into gpu_check.json).
# Everything it produces lands in $OUT (the device tool brings back at most 8 files):
#   env.txt  build.log  pytest.log  pytest.xml  bench.log  bench_cuda.json  bench_engine.json  gpu_check.json
# From the repository root, through the device tool (after building here with
# `LLMBENCH_CUDA=1 LLMBENCH_CUDA_ARCH=90 pip install --no-build-isolation -e .`):
#   run(command="bash benchmarks/gpu_check.sh", carry=["llmbench/libllmbench_cuda.so", ".gpu_carry"], timeout_s=420)
# .gpu_carry (git-ignored through .git/info/exclude) lets the end-to-end tests and the engine benchmark
# run there: the stories260K model, which lives outside the checkout, the gguf wheel the reference
# forward needs, and jsonschema (with its dependencies) that every benchmark result is validated with:
#   echo /.gpu_carry/ >> .git/info/exclude; mkdir -p .gpu_carry
#   cp ../shared/models/stories260K/stories260K.gguf .gpu_carry/
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .gpu_carry gguf==0.19.0 \
#       jsonschema==4.26.0 jsonschema-specifications==2025.9.1 referencing==0.37.0
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
#       --platform manylinux_2_17_x86_64 -d .gpu_carry rpds-py==2026.9.1
# Budget: build ~1 min, tests ~1.5 min, kernel benchmark ~0.5 min, engine benchmark ~2 min (three
# dummy builds of llama-1b, ~10 s each, and their runs), graphs on/off ~0.5 min; each stage has its own
# timeout (120 + 150 + 60 + 3 x 60 + 45 s at most), each cut to what is left of one overall budget
# (GPU_CHECK_BUDGET, default 340 s: the whole run ends inside six minutes), so the JSON is written
# whatever happens; a stage that finds no time left is skipped and its rc is 124.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
export PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH}   # benchmarks/*.py import llmbench from the checkout
T0=$(date +%s)
log() { echo "[gpu_check +$(($(date +%s) - T0))s] $*"; }
BUDGET=${GPU_CHECK_BUDGET:-340}
# run a stage for at most $1 seconds and never past the overall budget: cap SECONDS CMD...
cap() {
    local want=$1 left=$((BUDGET - ($(date +%s) - T0)))
    shift
    if [ "$left" -lt 3 ]; then log "no time left for: $*"; return 124; fi
    timeout "$((want < left ? want : left))" "$@"
}

{
    nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv 2>&1
    "$PY" -c "import sys, numpy; print('python', sys.version.split()[0], 'numpy', numpy.__version__)"
    command -v nvcc && nvcc --version | tail -1
} >"$OUT/env.txt" 2>&1

# ---- carried extras: the model where tests/conftest.py looks, the gguf package ----
if [ -f .gpu_carry/stories260K.gguf ] && [ ! -f ../shared/models/stories260K/stories260K.gguf ]; then
    mkdir -p ../shared/models/stories260K && cp .gpu_carry/stories260K.gguf ../shared/models/stories260K/
fi
if ls .gpu_carry/*.whl >/dev/null 2>&1; then
    "$PY" -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .gpu_carry/*.whl >>"$OUT/env.txt" 2>&1 &&
        export PYTHONPATH=/tmp/site${PYTHONPATH:+:$PYTHONPATH}
fi

# ---- build ----
log "building the C extension"
LIB=llmbench/libllmbench_cuda.so
if [ -f "$LIB" ]; then export LLMBENCH_CUDA=0; else export LLMBENCH_CUDA=1 LLMBENCH_CUDA_ARCH=90; fi
cap 120 "$PY" setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1
build_rc=$?
# cuBLAS is dlopened when a context is made, first through the library's rpath (the dev machine's
# toolkit); add the usual places in case it is elsewhere here
for d in /usr/local/cuda/lib64 /usr/local/cuda-13.0/lib64 \
    $("$PY" -c "import nvidia.cublas, os; print(os.path.join(list(nvidia.cublas.__path__)[0], 'lib'))" 2>/dev/null); do
    [ -d "$d" ] && LD_LIBRARY_PATH="$d${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
done
export LD_LIBRARY_PATH
{ ldd "$LIB" | grep "not found"; "$PY" -c "import llmbench.backends.cuda as c; print('available', c.available(), c.versions()); c.Context(); print('context (cuBLAS) ok')"; } >>"$OUT/env.txt" 2>&1
cat "$OUT/env.txt"

# ---- tests ----
log "tests (build rc=$build_rc)"
cap 150 "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/pytest.xml" tests/test_cuda.py tests/test_cuda_kernels.py \
    tests/test_cuda_engine.py >"$OUT/pytest.log" 2>&1
test_rc=$?
grep -E "passed|failed|error" "$OUT/pytest.log" | tail -3
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -40

# ---- benchmarks: the kernels, then the engine (llmbench bench --backend cuda) ----
log "kernel benchmark"
cap 60 "$PY" benchmarks/bench_cuda.py --quick --out "$OUT/bench_cuda.json" >"$OUT/bench.log" 2>&1
bench_rc=$?
tail -5 "$OUT/bench.log"
export LLMBENCH_CACHE=/tmp/llmbench-cache   # dummy models are built here, not carried
engine_rc=0
for t in Q4_K_M Q8_0 F16; do
    log "llmbench bench --backend cuda llama-1b:$t"
    echo "== llama-1b:$t" >>"$OUT/bench.log"
    cap 60 "$PY" -m llmbench bench --backend cuda --model "llama-1b:$t" --pp 512 --tg 128 --reps 3 --warmup 1 \
        --batch 8 --input-len 128 --output-len 32 -o "/tmp/bench_$t.json" >>"$OUT/bench.log" 2>&1 || engine_rc=$?
done
"$PY" - "$OUT/bench_engine.json" /tmp/bench_Q4_K_M.json /tmp/bench_Q8_0.json /tmp/bench_F16.json <<'EOF'
import json, os, sys
json.dump([json.load(open(p)) for p in sys.argv[2:] if os.path.exists(p)], open(sys.argv[1], "w"), indent=1)
EOF
tail -30 "$OUT/bench.log"

log "CUDA Graphs on and off (llama-1b Q4_K_M, built above)"
echo "== bench_cuda_graphs" >>"$OUT/bench.log"
cap 45 "$PY" benchmarks/bench_cuda_graphs.py --batch 1 8 64 --tokens 24 --prompt 16 --rounds 3 \
    --out /tmp/bench_graphs.json >>"$OUT/bench.log" 2>&1
graphs_rc=$?
tail -4 "$OUT/bench.log"

log "done"
"$PY" - "$OUT" "$build_rc" "$test_rc" "$bench_rc" "$engine_rc" "$graphs_rc" "$(($(date +%s) - T0))" <<'EOF'
import json, os, sys
out, build, test, bench, engine, graphs, secs = sys.argv[1], *map(int, sys.argv[2:])
summary = [l.strip() for l in open(f"{out}/pytest.log", errors="replace") if " passed" in l or " failed" in l][-1:]
json.dump({"build_rc": build, "test_rc": test, "bench_rc": bench, "engine_bench_rc": engine, "graphs_rc": graphs,
           "seconds": secs, "pytest": summary,
           "graphs": json.load(open("/tmp/bench_graphs.json")) if os.path.exists("/tmp/bench_graphs.json") else None,
           "env": open(f"{out}/env.txt", errors="replace").read()}, open(f"{out}/gpu_check.json", "w"), indent=1)
EOF
