"""The GGUF reader (csrc/gguf.c via llmbench.models.gguf) against the gguf package's reader and writer,
on the real stories260K model and on written files with every metadata type."""

from __future__ import annotations

import gc
import os

import gguf
import numpy as np
import pytest

import llmbench
from llmbench import _core
from llmbench.models.gguf import GGUFFile


def gguf_contents(reader: gguf.GGUFReader) -> dict:
    """Metadata as the gguf package decodes it (skipping its pseudo-fields GGUF.*)."""
    out = {}
    for name, field in reader.fields.items():
        if name.startswith("GGUF."):
            continue
        out[name] = field.contents()
    return out


def assert_same_value(ours, ref, key):
    if isinstance(ours, np.ndarray):
        assert np.array_equal(ours, np.asarray(ref, dtype=ours.dtype)), key
    elif isinstance(ours, list):
        assert len(ours) == len(ref), key
        for a, b in zip(ours, ref):
            assert_same_value(a, b, key)
    elif isinstance(ours, float):
        assert ours == pytest.approx(float(ref), rel=0, abs=0), key
    else:
        assert ours == ref and type(ours) is type(ref) or (isinstance(ours, bool) and ours == bool(ref)), key


def test_type_table_matches_gguf_package():
    ours = {tid: (name, blck, size) for tid, name, blck, size in _core.type_traits()}
    for t, (blck, size) in gguf.GGML_QUANT_SIZES.items():
        assert ours[int(t)] == (t.name, blck, size)
    assert set(ours) == {int(t) for t in gguf.GGML_QUANT_SIZES}


def test_stories_matches_gguf_reader(stories_path):
    ref = gguf.GGUFReader(stories_path)
    with GGUFFile(stories_path) as f:
        assert f.version == 3
        assert f.alignment == ref.alignment
        assert f.data_offset == ref.data_offset
        meta = f.metadata
        refmeta = gguf_contents(ref)
        assert list(meta) == list(refmeta)
        for k in meta:
            assert_same_value(meta[k], refmeta[k], k)
        assert meta["general.architecture"] == "llama"
        assert len(meta["tokenizer.ggml.tokens"]) == 512
        assert f.metadata_types["tokenizer.ggml.scores"] == "array[float32]"
        assert [t.name for t in ref.tensors] == list(f.tensors)
        for rt in ref.tensors:
            t = f.tensors[rt.name]
            assert t.ne == tuple(int(x) for x in rt.shape)
            assert t.type == rt.tensor_type.name
            assert t.offset == rt.data_offset
            assert t.nbytes == rt.n_bytes
            raw = f.raw(rt.name)
            assert raw.dtype == np.uint8 and raw.nbytes == rt.n_bytes
            assert np.array_equal(raw, np.asarray(rt.data).view(np.uint8).reshape(-1))


def write_all_types(path, alignment=None):
    w = gguf.GGUFWriter(str(path), arch="llama")
    if alignment:
        w.add_custom_alignment(alignment)
    w.add_uint8("t.u8", 250)
    w.add_int8("t.i8", -100)
    w.add_uint16("t.u16", 65535)
    w.add_int16("t.i16", -32768)
    w.add_uint32("t.u32", 2**32 - 1)
    w.add_int32("t.i32", -(2**31))
    w.add_float32("t.f32", 0.1)
    w.add_bool("t.bool", True)
    w.add_string("t.str", "naïve 漢字 🦙")
    w.add_uint64("t.u64", 2**64 - 1)
    w.add_int64("t.i64", -(2**63))
    w.add_float64("t.f64", 1e-300)
    w.add_array("t.arr_i32", [1, -2, 3])
    w.add_array("t.arr_f32", [0.5, 1.5])
    w.add_array("t.arr_str", ["a", "", "ü"])
    w.add_array("t.arr_bool", [True, False])
    w.add_array("t.arr_nested", [[1, 2], [3]])
    w.add_array("t.arr_empty", [])
    rng = np.random.default_rng(0)
    w.add_tensor("x.f32", rng.standard_normal((3, 5)).astype(np.float32))
    w.add_tensor("x.f16", rng.standard_normal((7,)).astype(np.float16))
    w.add_tensor("x.q8", rng.integers(0, 255, size=(2, 34), dtype=np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.add_tensor("x.i32", np.arange(4, dtype=np.int32).reshape(1, 1, 2, 2))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


@pytest.mark.parametrize("alignment", [None, 64, 4096])
def test_written_file_every_type(tmp_path, alignment):
    path = tmp_path / "all.gguf"
    write_all_types(path, alignment)
    ref = gguf.GGUFReader(path)
    with GGUFFile(path) as f:
        assert f.alignment == (alignment or 32)
        meta, refmeta = f.metadata, gguf_contents(ref)
        assert list(meta) == list(refmeta)
        for k in meta:
            if k == "t.arr_nested":  # the gguf package's contents() flattens nested arrays
                assert_same_value(np.concatenate(meta[k]), refmeta[k], k)
            else:
                assert_same_value(meta[k], refmeta[k], k)
        assert meta["t.i64"] == -(2**63) and meta["t.u64"] == 2**64 - 1
        assert meta["t.f32"] == np.float32(0.1)
        assert meta["t.bool"] is True
        assert meta["t.arr_nested"][0].tolist() == [1, 2]
        assert meta["t.arr_str"] == ["a", "", "ü"]
        assert meta["t.arr_bool"].dtype == np.bool_
        types = f.metadata_types
        assert types["t.u8"] == "uint8" and types["t.arr_nested"] == "array[array]"
        assert f.tensors["x.f32"].shape == (3, 5) and f.tensors["x.f32"].type == "F32"
        assert f.tensors["x.q8"].shape == (2, 32) and f.tensors["x.q8"].type == "Q8_0"
        assert f.tensors["x.i32"].shape == (1, 1, 2, 2) and f.tensors["x.i32"].type == "I32"
        for rt in ref.tensors:
            assert np.array_equal(f.raw(rt.name), np.asarray(rt.data).view(np.uint8).reshape(-1))
            assert f.tensors[rt.name].offset % f.alignment == 0


def test_raw_is_zero_copy_and_outlives_close(tmp_path):
    path = tmp_path / "m.gguf"
    write_all_types(path)
    f = GGUFFile(path)
    a = f.raw("x.f32")
    b = f.raw("x.f32")
    assert np.shares_memory(a, b)
    assert not a.flags.writeable
    with pytest.raises(ValueError):
        a[0] = 1
    expected = a.copy()
    f.close()
    assert f.closed
    with pytest.raises(ValueError, match="closed"):
        f.raw("x.f32")
    del f
    gc.collect()
    os.unlink(path)  # the mapping stays valid while the view is referenced
    assert np.array_equal(a, expected)
    assert a.view(np.float32).shape == (15,)


def test_unknown_tensor_name_suggests(stories_path):
    with GGUFFile(stories_path) as f:
        with pytest.raises(KeyError, match="did you mean.*output.weight"):
            f.raw("output.weigth")


def test_from_bytes_equals_from_path(stories_path):
    data = stories_path.read_bytes()
    a, b = GGUFFile(data), GGUFFile(stories_path)
    assert a.path is None
    assert list(a.tensors.values()) == list(b.tensors.values())
    assert np.array_equal(a.raw("output.weight"), b.raw("output.weight"))
    assert "<buffer>" in repr(a)


def test_missing_file_and_directory(tmp_path):
    with pytest.raises(FileNotFoundError) as e:
        GGUFFile(tmp_path / "nope.gguf")
    assert e.value.filename == str(tmp_path / "nope.gguf")
    with pytest.raises(IsADirectoryError):
        GGUFFile(tmp_path)
    with pytest.raises(TypeError):
        GGUFFile(42)  # type: ignore[arg-type]


def test_not_a_gguf(tmp_path):
    p = tmp_path / "model.safetensors"
    p.write_bytes(b'{"__metadata__": {}}' + b"\0" * 100)
    with pytest.raises(llmbench.GGUFError, match="not a GGUF file") as e:
        GGUFFile(p)
    assert isinstance(e.value, ValueError)
    empty = tmp_path / "empty.gguf"
    empty.write_bytes(b"")
    with pytest.raises(llmbench.GGUFError, match="magic at byte 0") as e:
        GGUFFile(empty)
    assert str(e.value).startswith(f"{empty}: ")   # the file is named
