"""benchmarks/ab_builds.py: two copies of this build's extension, loaded side by side, drive their own
engines and kernels (the ratios themselves are timing: only their form is checked), and bad input
gets a clear error."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import pytest

import llmbench._core
from llmbench.models.weight_types import type_id

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import ab_builds

LINE = re.compile(r"A [0-9.]+ B [0-9.]+ (t/s|GOP/s), B/A median [0-9.]+ \(min [0-9.]+, max [0-9.]+, 3 rounds\)")


@pytest.fixture(scope="module")
def builds(tmp_path_factory):
    d = tmp_path_factory.mktemp("builds")
    paths = [d / f"{name}.so" for name in ("a", "b")]
    for p in paths:
        shutil.copy(llmbench._core.__file__, p)
    return [str(p) for p in paths]


def test_engines_of_each_build(builds, stories_path, capsys):
    mods = [ab_builds.load_build(p) for p in builds]
    assert mods[0] is not mods[1] and mods[0].Engine is not mods[1].Engine
    llms = [ab_builds.make_llm(m, str(stories_path), 1) for m in mods]
    assert [type(llm.engine) for llm in llms] == [mods[0].Engine, mods[1].Engine]
    assert llmbench.llm._core is llmbench._core   # restored for everything else
    assert ab_builds.main([*builds, "--model", str(stories_path), "--pp", "32", "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert "pp32, 1 thread(s)" in out and LINE.search(out), out


def test_decode_mode_times_the_decode_steps_of_a_batch(builds, stories_path, capsys):
    assert ab_builds.main([*builds, "--model", str(stories_path), "--mode", "decode", "--batch", "3", "--depth", "20",
                           "--tg", "5", "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert "decode of 3 x tg5 at depth 20, 1 thread(s)" in out and LINE.search(out), out
    with pytest.raises(SystemExit):
        ab_builds.main([*builds, "--model", str(stories_path), "--mode", "decode", "--batch", "0"])


def test_the_imported_build_loads_as_its_own_module(builds):
    # the usual call names this checkout's own extension as B: loading the file `import llmbench` had
    # loaded once handed back A's module object refilled with B's functions, so A ran B's kernels
    a, b = ab_builds.load_build(builds[0]), ab_builds.load_build(llmbench._core.__file__)
    assert a is not b and b is not llmbench._core and a.vec_dot is not b.vec_dot
    assert sys.modules["llmbench._core"] is llmbench._core


def test_the_private_copy_is_removed_once_loaded(builds, tmp_path, monkeypatch):
    # each load copies the file to its own folder; every run used to leave that folder (19 MB) behind
    monkeypatch.setattr(ab_builds.tempfile, "tempdir", str(tmp_path))
    mod = ab_builds.load_build(builds[0])
    assert list(tmp_path.iterdir()) == [] and mod.vec_dot_interleave(type_id("Q4_0")) in (0, 8, 16)


def test_kernels_compared_bit_for_bit(builds, capsys):
    assert ab_builds.main([*builds, "--kernel", "Q4_K", "--shapes", "20x512", "--tokens", "9", "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert "Q4_K 20x512 x 9 tokens" in out and LINE.search(out), out


def test_interleaved_weights_from_copies(builds, capsys):
    kind = next((t for t in ("Q4_K", "Q4_1") if llmbench._core.vec_dot_interleave(type_id(t))), None)
    if not kind:
        pytest.skip("no interleaved layout at this SIMD level")
    rows = 2 * llmbench._core.vec_dot_interleave(type_id(kind))
    assert ab_builds.main([*builds, "--kernel", kind, "--interleaved", "--copies", "4", "--shapes", f"{rows}x512",
                           "--tokens", "1", "--rounds", "3"]) == 0
    out = capsys.readouterr().out
    assert f"{kind} interleaved {rows}x512 x 1 tokens, 1 thread(s), 4 copies" in out and LINE.search(out), out


def test_bad_input(builds, tmp_path):
    with pytest.raises(SystemExit, match="is not a file"):
        ab_builds.main([builds[0], str(tmp_path / "missing.so")])
    with pytest.raises(SystemExit, match="--interleaved F16: .*no interleaved layout"):
        ab_builds.main([*builds, "--kernel", "F16", "--interleaved", "--shapes", "32x64", "--rounds", "1"])
    for args in (["--shapes", "768"], ["--shapes", "0x16"], ["--rounds", "0"], ["--copies", "0"]):
        with pytest.raises(SystemExit):
            ab_builds.main([*builds, "--kernel", "F16", *args])


def test_rounds_split_by_the_bandwidth_around_them():
    rates = [[100.0, 100.0, 100.0, 100.0, 100.0], [110.0, 120.0, 90.0, 95.0, 130.0], [45.0, 48.5, 82.0, 85.0, 41.0]]
    lines = ab_builds.summary("x", rates, "GOP/s").splitlines()
    assert lines[0].startswith("x: A 100.0 B 110.0 GOP/s, B/A median 1.100 (min 0.900, max 1.300, 5 rounds)")
    assert lines[1] == "  read 40-50 GB/s: A 100.0 B 120.0 GOP/s, B/A median 1.200 (min 1.100, max 1.300, 3 rounds)"
    assert lines[2] == "  read 80-90 GB/s: A 100.0 B 92.5 GOP/s, B/A median 0.925 (min 0.900, max 0.950, 2 rounds)"
    assert len(lines) == 3
    assert ab_builds.summary("x", rates[:2] + [[]], "t/s").count("\n") == 0   # not probed: one line


def test_by_bandwidth_probes_every_round(builds, capsys):
    assert ab_builds.main([*builds, "--kernel", "Q4_K", "--shapes", "20x512", "--tokens", "1", "--rounds", "3",
                           "--by-bandwidth"]) == 0
    out = capsys.readouterr().out
    bins = re.findall(r"read \d+-\d+ GB/s: .* B/A median [0-9.]+ \(min [0-9.]+, max [0-9.]+, (\d) rounds\)", out)
    assert LINE.search(out) and bins and sum(int(n) for n in bins) == 3, out
