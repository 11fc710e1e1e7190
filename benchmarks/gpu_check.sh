#!/usr/bin/env bash
# gpu_check.sh — the CUDA backend's checks on a GPU machine, in one run of a few minutes: build the C
# extension for that machine's Python (the CUDA library itself is carried, built on the dev machine
# with LLMBENCH_CUDA_ARCH=90; it is rebuilt here only if missing), run tests/test_cuda*.py, then the
# kernel benchmark benchmarks/bench_cuda.py. Everything it produces lands in $OUT (at most 8 files):
#   env.txt  build.log  pytest.log  pytest.xml  bench.log  bench_cuda.json  gpu_check.json
# From the repository root, through the device tool (after building here with
# `LLMBENCH_CUDA=1 LLMBENCH_CUDA_ARCH=90 pip install --no-build-isolation -e .`):
#   run(command="bash benchmarks/gpu_check.sh", carry=["llmbench/libllmbench_cuda.so", ".gpu_carry"], timeout_s=540)
# .gpu_carry (optional, git-ignored through .git/info/exclude) lets the end-to-end test run there: the
# stories260K model, which lives outside the checkout, and the gguf wheel its reference forward needs:
#   echo /.gpu_carry/ >> .git/info/exclude; mkdir -p .gpu_carry
#   cp ../shared/models/stories260K/stories260K.gguf .gpu_carry/
#   python3 -m pip download --no-deps --only-binary=:all: --python-version 3.12 -d .gpu_carry gguf==0.19.0
# Budget: build ~1 min, tests ~1 min, benchmark ~2 min; each stage has its own timeout (120 + 150 +
# 180 s at most), so the JSON is written whatever happens.
set -uo pipefail
OUT=${OUT:-/tmp/gpu_check}
mkdir -p "$OUT"
PY=${PYTHON:-python3}
export PYTHONUNBUFFERED=1
T0=$(date +%s)
log() { echo "[gpu_check +$(($(date +%s) - T0))s] $*"; }

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
timeout 120 "$PY" setup.py -q build_ext --inplace >"$OUT/build.log" 2>&1
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
timeout 150 "$PY" -m pytest -q -p no:cacheprovider --junitxml="$OUT/pytest.xml" tests/test_cuda.py tests/test_cuda_kernels.py \
    >"$OUT/pytest.log" 2>&1
test_rc=$?
grep -E "passed|failed|error" "$OUT/pytest.log" | tail -3
grep -E "^(FAILED|ERROR)" "$OUT/pytest.log" | head -40

# ---- benchmark ----
log "benchmark"
timeout 180 "$PY" benchmarks/bench_cuda.py --out "$OUT/bench_cuda.json" >"$OUT/bench.log" 2>&1
bench_rc=$?
tail -5 "$OUT/bench.log"

log "done"
"$PY" - "$OUT" "$build_rc" "$test_rc" "$bench_rc" "$(($(date +%s) - T0))" <<'EOF'
import json, sys
out, build, test, bench, secs = sys.argv[1], *map(int, sys.argv[2:])
summary = [l.strip() for l in open(f"{out}/pytest.log", errors="replace") if " passed" in l or " failed" in l][-1:]
json.dump({"build_rc": build, "test_rc": test, "bench_rc": bench, "seconds": secs, "pytest": summary,
           "env": open(f"{out}/env.txt", errors="replace").read()}, open(f"{out}/gpu_check.json", "w"), indent=1)
EOF
