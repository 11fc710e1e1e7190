"""GGUF writer: files read back identically by llmbench.models.gguf.GGUFFile and gguf.GGUFReader; interrupted
or out-of-space writes leave nothing behind."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from llmbench.models import gguf_writer as writer
from llmbench.models.gguf import GGUFFile
from llmbench.models.gguf_writer import GGUFWriter, TensorSpec, write_gguf

gguf = pytest.importorskip("gguf")

METADATA = {
    "general.architecture": "llama",
    "u8": 255, "i8": -128, "u16": 65535, "i16": -32768, "u32": 2**32 - 1, "i32": -2**31,
    "u64": 2**64 - 1, "i64": -2**63, "f32": 0.1, "f64": 1e-300, "b_true": True, "b_false": False,
    "s": "héllo wörld ✓", "s_empty": "",
    "a_f32": np.array([1.5, -2.25, 3e-5], np.float32), "a_i64": np.array([-1, 2**40], np.int64),
    "a_u8": np.arange(256, dtype=np.uint8), "a_bool": np.array([True, False, True]),
    "a_str": ["a", "", "日本語", "Ġthe"], "a_empty_i32": np.zeros(0, np.int32), "a_empty_str": [],
    "a_nested": [np.array([1, 2], np.int32), np.array([3], np.int32)],
    "a_nested_str": [["x", "y"], ["z"]],
}
TYPES = {"u8": "uint8", "i8": "int8", "u16": "uint16", "i16": "int16", "u32": "uint32", "i32": "int32",
         "u64": "uint64", "i64": "int64", "f32": "float32", "f64": "float64", "a_empty_str": "array[string]",
         "a_nested_str": "array[array[string]]"}
EXPECTED_TYPES = {"general.architecture": "string", **TYPES, "b_true": "bool", "b_false": "bool", "s": "string",
                  "s_empty": "string", "a_f32": "array[float32]", "a_i64": "array[int64]", "a_u8": "array[uint8]",
                  "a_bool": "array[bool]", "a_str": "array[string]", "a_empty_i32": "array[int32]",
                  "a_nested": "array[array]", "a_nested_str": "array[array]"}


def _tensors(rng: np.random.Generator) -> dict[str, tuple[str, np.ndarray]]:
    x = rng.standard_normal((3, 64)).astype(np.float32)
    return {
        "f32": ("F32", x),
        "f32_3d": ("F32", rng.standard_normal((2, 3, 5)).astype(np.float32)),   # 5*4 bytes: needs padding
        "f16": ("F16", x.astype(np.float16)),
        "bf16": ("BF16", (x.view(np.uint32) >> 16).astype(np.uint16)),
        "i8": ("I8", rng.integers(-128, 127, (7,), dtype=np.int8)),
        "q8_0": ("Q8_0", gguf.quants.quantize(x, gguf.GGMLQuantizationType.Q8_0)),
        "q4_k": ("Q4_K", rng.integers(0, 256, (2, 144 * 2), dtype=np.uint8)),   # 2 rows of 512
    }


def _gguf_reader_metadata(path) -> dict:
    r = gguf.GGUFReader(path)
    return {name: (f.types, f) for name, f in r.fields.items() if not name.startswith("GGUF.")}


def test_round_trip_both_readers(tmp_path):
    rng = np.random.default_rng(0)
    tensors = _tensors(rng)
    path = tmp_path / "m.gguf"
    write_gguf(path, METADATA, tensors, types=TYPES)

    with GGUFFile(path) as f:
        assert f.version == 3 and f.alignment == 32
        assert f.metadata_types == EXPECTED_TYPES
        md = f.metadata
        for k, v in METADATA.items():
            if isinstance(v, np.ndarray):
                assert md[k].dtype == v.dtype and np.array_equal(md[k], v), k
            elif k == "a_nested":
                assert [a.tolist() for a in md[k]] == [a.tolist() for a in v]
            elif k == "f32":
                assert md[k] == float(np.float32(v))
            else:
                assert md[k] == v, k
        for name, (typ, data) in tensors.items():
            t = f.tensors[name]
            assert t.type == typ and t.offset % 32 == 0
            assert f.raw(name).tobytes() == data.tobytes(), name
        assert list(f.tensors) == list(tensors)

    r = gguf.GGUFReader(path)
    fields = {k: v for k, v in r.fields.items() if not k.startswith("GGUF.")}
    assert list(fields) == list(METADATA)
    for k in ("u8", "i8", "u16", "i16", "u32", "i32", "u64", "i64", "f64", "b_true", "s", "s_empty"):
        assert fields[k].contents() == METADATA[k], k
    assert fields["u32"].types == [gguf.GGUFValueType.UINT32]
    assert fields["a_str"].contents() == METADATA["a_str"]
    assert fields["a_f32"].contents() == METADATA["a_f32"].tolist()
    assert fields["a_empty_str"].types[:1] == [gguf.GGUFValueType.ARRAY]
    for t in r.tensors:
        typ, data = tensors[t.name]
        assert t.tensor_type.name == typ
        assert np.asarray(t.data).tobytes() == data.tobytes(), t.name
        want_ne = list(reversed(data.shape))
        if data.dtype == np.uint8 and typ == "Q8_0":
            want_ne[0] = want_ne[0] // 34 * 32
        if typ == "Q4_K":
            want_ne[0] = want_ne[0] // 144 * 256
        assert list(t.shape) == want_ne, t.name


def test_streamed_in_pieces_equals_one_shot(tmp_path):
    rng = np.random.default_rng(1)
    a = rng.standard_normal((10, 48)).astype(np.float32)
    b = rng.standard_normal((3,)).astype(np.float32)
    write_gguf(tmp_path / "one.gguf", {"k": "v"}, {"a": ("F32", a), "b": ("F32", b)})
    specs = [TensorSpec("a", a.shape, "F32"), TensorSpec("b", b.shape, "F32")]
    with GGUFWriter(tmp_path / "pieces.gguf", {"k": "v"}, specs) as w:
        for i in range(0, 10, 3):
            w.write(a[i:i + 3])
        w.write(b.tobytes())
        assert w.current is None
    assert (tmp_path / "one.gguf").read_bytes() == (tmp_path / "pieces.gguf").read_bytes()


def test_custom_alignment(tmp_path):
    path = tmp_path / "a.gguf"
    x = np.ones((3,), np.float32)
    write_gguf(path, {"general.alignment": 64}, {"x": ("F32", x), "y": ("F32", x)},
               types={"general.alignment": "uint32"})
    with GGUFFile(path) as f:
        assert f.alignment == 64
        assert all(t.offset % 64 == 0 for t in f.tensors.values())
    r = gguf.GGUFReader(path)
    assert r.alignment == 64 and [float(v) for v in r.tensors[1].data] == [1.0] * 3
    with pytest.raises(ValueError, match="power of two"):
        write_gguf(path, {"general.alignment": 48}, {}, types={"general.alignment": "uint32"})
    with pytest.raises(ValueError, match="uint32"):
        write_gguf(path, {"general.alignment": 64}, {})


def _leftovers(d) -> list[str]:
    return sorted(os.listdir(d))


def test_exception_mid_stream_leaves_nothing(tmp_path):
    specs = [TensorSpec("a", (4, 32), "F32"), TensorSpec("b", (4, 32), "F32")]
    with pytest.raises(RuntimeError, match="boom"):
        with GGUFWriter(tmp_path / "m.gguf", {}, specs) as w:
            w.write(np.zeros((4, 32), np.float32))
            raise RuntimeError("boom")
    assert _leftovers(tmp_path) == []


def test_keyboard_interrupt_keeps_existing_destination(tmp_path):
    dest = tmp_path / "m.gguf"
    dest.write_bytes(b"old model")
    specs = [TensorSpec("a", (4, 32), "F32")]
    with pytest.raises(KeyboardInterrupt):
        with GGUFWriter(dest, {}, specs) as w:
            w.write(np.zeros((2, 32), np.float32))
            raise KeyboardInterrupt
    assert _leftovers(tmp_path) == ["m.gguf"] and dest.read_bytes() == b"old model"


def test_disk_full_leaves_nothing(tmp_path, monkeypatch):
    real = writer._write_all
    budget = [2000]

    def full_disk(fd, data):
        if len(data) > budget[0]:
            real(fd, data[:budget[0]])
            raise OSError(errno.ENOSPC, "No space left on device")
        budget[0] -= len(data)
        real(fd, data)

    monkeypatch.setattr(writer, "_write_all", full_disk)
    specs = [TensorSpec("a", (64, 32), "F32")]
    with pytest.raises(OSError) as e:
        with GGUFWriter(tmp_path / "m.gguf", {"k": "v"}, specs) as w:
            for _ in range(8):
                w.write(np.zeros((8, 32), np.float32))
    assert e.value.errno == errno.ENOSPC
    assert _leftovers(tmp_path) == []


def test_file_size_limit_in_the_kernel_leaves_nothing(tmp_path):
    # A real write failure from the kernel (EFBIG past RLIMIT_FSIZE), in a child process.
    code = textwrap.dedent(f"""
        import resource, signal, numpy as np
        from llmbench.models.gguf_writer import GGUFWriter, TensorSpec
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (100_000, 100_000))
        try:
            with GGUFWriter({str(tmp_path / 'm.gguf')!r}, {{}}, [TensorSpec("a", (1000, 64), "F32")]) as w:
                for _ in range(10):
                    w.write(np.ones((100, 64), np.float32))
        except OSError as e:
            print("errno", e.errno)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert f"errno {errno.EFBIG}" in out.stdout
    assert _leftovers(tmp_path) == []


def test_incomplete_or_overlong_writes_are_errors(tmp_path):
    specs = [TensorSpec("a", (2, 32), "F32"), TensorSpec("b", (32,), "F32")]
    with pytest.raises(ValueError, match="'a' is incomplete"):
        with GGUFWriter(tmp_path / "m.gguf", {}, specs) as w:
            w.write(np.zeros((1, 32), np.float32))
    with pytest.raises(ValueError, match="only 256 of its 256 remain"):
        with GGUFWriter(tmp_path / "m.gguf", {}, specs) as w:
            w.write(np.zeros((3, 32), np.float32))
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("specs, match", [
    ([TensorSpec("a", (32,), "F32"), TensorSpec("a", (32,), "F32")], "duplicate tensor name"),
    ([TensorSpec("x" * 64, (32,), "F32")], "1..63 bytes"),
    ([TensorSpec("a", (2, 100), "Q4_0")], "not a whole number of Q4_0 blocks"),
    ([TensorSpec("a", (2, 32), "Q9_9")], "unknown ggml type"),
    ([TensorSpec("a", (1, 1, 1, 1, 32), "F32")], "1..4 positive dimensions"),
    ([TensorSpec("a", (0, 32), "F32")], "1..4 positive dimensions"),
])
def test_bad_tensor_specs(tmp_path, specs, match):
    with pytest.raises(ValueError, match=match):
        GGUFWriter(tmp_path / "m.gguf", {}, specs)
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize("metadata, types, match", [
    ({"k": 300}, {"k": "uint8"}, "out of range for uint8"),
    ({"k": -1}, {"k": "uint32"}, "out of range"),
    ({"k": []}, None, "empty list"),
    ({"k": object()}, None, "cannot write a object"),
    ({"k": 1}, {"k": "uint24"}, "unknown GGUF value type"),
    ({"k": 1}, {"k": "string"}, "expected a string"),
])
def test_bad_metadata(tmp_path, metadata, types, match):
    with pytest.raises(ValueError, match=match):
        write_gguf(tmp_path / "m.gguf", metadata, {}, types=types)
    assert _leftovers(tmp_path) == []
