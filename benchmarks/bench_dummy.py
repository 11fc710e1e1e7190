"""Time dummy-model builds: seconds per preset/type, GB/s to disk, peak memory, and the throughput of
the two stages that bound them (random weights, quantization kernels) so the total can be explained.

    python benchmarks/bench_dummy.py                                  # tiny, llama-125m, llama-1b in Q4_K_M
    python benchmarks/bench_dummy.py --presets llama-8b --types Q4_K_M --json results.json

Each build runs in a fresh process (so its peak RSS is its own) writing into a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

CHILD = """
import json, resource, sys
from llmbench.models.dummy import build
r = build(sys.argv[1], sys.argv[2], sys.argv[3])
print(json.dumps({"seconds": r.seconds, "file_size": r.file_size, "n_elements": r.n_elements,
                  "bits_per_weight": r.bits_per_weight,
                  "peak_rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
"""


def build_once(preset: str, mix: str, directory: str) -> dict:
    out = os.path.join(directory, f"{preset}-{mix}.gguf")
    proc = subprocess.run([sys.executable, "-c", CHILD, preset, mix, out], capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"building {preset} {mix} failed:\n{proc.stderr}")
    os.unlink(out)
    return json.loads(proc.stdout.strip().splitlines()[-1])


def stage_throughput(reps: int = 3) -> dict[str, float]:
    """Million elements per second of fill_normal and of quantizing to each type (median of reps,
    after one warmup), on a 4M-element chunk like the builder's."""
    from llmbench import _core
    from llmbench.models import weight_types as quant

    x = np.empty((4096, 1024), np.float32)

    def rate(f) -> float:  # noqa: ANN001
        f()
        ts = []
        for _ in range(reps):
            t0 = time.perf_counter()
            f()
            ts.append(time.perf_counter() - t0)
        return x.size / statistics.median(ts) / 1e6

    out = {"fill_normal": rate(lambda: _core.fill_normal(x, 1, 0.02, 0.0, 0))}
    for t in ("F16", "BF16", "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q5_K", "Q6_K"):
        out[f"quantize {t}"] = rate(lambda t=t: quant.quantize(x, t))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--presets", nargs="+", default=["tiny", "llama-125m", "llama-1b"])
    ap.add_argument("--types", nargs="+", default=["Q4_K_M"])
    ap.add_argument("--repeat", type=int, default=1, help="builds per preset/type (median reported)")
    ap.add_argument("--dir", help="where to write the models (default: a temporary directory)")
    ap.add_argument("--json", help="also write all results and raw samples to this file")
    args = ap.parse_args()

    from llmbench import _core

    results = {"threads": _core.max_threads(), "stages_M_per_s": stage_throughput(), "builds": []}
    print(f"threads: {results['threads']}")
    for name, r in results["stages_M_per_s"].items():
        print(f"  {name:16} {r:8.1f} M elements/s")
    with tempfile.TemporaryDirectory(dir=args.dir) as d:
        print(f"{'preset':14} {'type':7} {'weights':>9} {'seconds':>8} {'GB/s':>6} {'bpw':>6} {'peak RSS':>9}")
        for preset in args.presets:
            for mix in args.types:
                runs = [build_once(preset, mix, d) for _ in range(args.repeat)]
                secs = statistics.median(r["seconds"] for r in runs)
                r0 = runs[0]
                row = {"preset": preset, "type": mix, "seconds": secs, "samples": runs,
                       "gb_per_s": r0["file_size"] / 1e9 / secs, "peak_rss": max(r["peak_rss"] for r in runs)}
                results["builds"].append(row)
                print(f"{preset:14} {mix:7} {r0['n_elements'] / 1e6:8.1f}M {secs:8.2f} {row['gb_per_s']:6.3f} "
                      f"{r0['bits_per_weight']:6.2f} {row['peak_rss'] / 2**20:7.0f} MiB", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=2)


if __name__ == "__main__":
    main()
