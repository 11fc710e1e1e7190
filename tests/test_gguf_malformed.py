"""Malformed GGUF files: one per validation rule of the reader, built by patching a valid file
written with the gguf package (field offsets found with gguf.GGUFReader), plus truncations and a
mutation fuzz of the real stories260K model. Every malformed file must raise GGUFError (a
ValueError) whose message names the field and its byte offset; nothing may crash."""

from __future__ import annotations

import struct

import gguf
import numpy as np
import pytest

from llmbench import GGUFError
from llmbench.models.gguf import GGUFFile


@pytest.fixture(scope="module")
def valid(tmp_path_factory):
    """A valid file and the byte offsets of the fields the cases patch."""
    path = tmp_path_factory.mktemp("gguf") / "valid.gguf"
    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_custom_alignment(64)
    w.add_string("k.str", "hello")
    w.add_bool("k.bool", True)
    w.add_uint32("k.u32", 7)
    w.add_array("k.arr", [1, 2, 3])
    w.add_array("k.strs", ["x", "yy"])
    w.add_tensor("a", np.zeros((3, 8), np.float32) + 1)
    w.add_tensor("b", np.full((1, 34), 3, np.uint8), raw_dtype=gguf.GGMLQuantizationType.Q8_0)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = path.read_bytes()
    r = gguf.GGUFReader(path)
    base = r.data.ctypes.data

    def at(part) -> int:
        return part.ctypes.data - base

    f = r.fields
    ta, tb = r.tensors[0].field, r.tensors[1].field  # parts: name_len, name, n_dims, dims, type, offset
    off = {
        "version": 4, "n_tensors": 8, "n_kv": 16,
        "key0_len": f["general.architecture"].offset,
        "str_len": at(f["k.str"].parts[3]), "str_data": at(f["k.str"].parts[4]),
        "str_type": at(f["k.str"].parts[2]),
        "bool": at(f["k.bool"].parts[3]),
        "arr_type": at(f["k.arr"].parts[3]), "arr_len": at(f["k.arr"].parts[4]),
        "strs_elem_len": at(f["k.strs"].parts[5]),
        "u32_key": at(f["k.u32"].parts[1]),
        "align_type": at(f["general.alignment"].parts[2]), "align": at(f["general.alignment"].parts[3]),
        "a_ndims": at(ta.parts[2]), "a_dim0": at(ta.parts[3]), "a_dim1": at(ta.parts[3]) + 8,
        "a_type": at(ta.parts[4]), "a_offset": at(ta.parts[5]),
        "b_name": at(tb.parts[1]), "b_dim0": at(tb.parts[3]), "b_offset": at(tb.parts[5]),
        "data": r.data_offset,
    }
    assert data[off["b_name"]:off["b_name"] + 1] == b"b"
    return data, off


def u32(v: int) -> bytes:
    return struct.pack("<I", v)


def u64(v: int) -> bytes:
    return struct.pack("<Q", v)


def patch(data: bytes, at: int, new: bytes) -> bytes:
    return data[:at] + new + data[at + len(new):]


# (case id, field name -> bytes to write there, or a callable(data, off) -> bytes; expected message part)
CASES = [
    ("magic", lambda d, o: b"GGML" + d[4:], "magic at byte 0"),
    ("version-1", ("version", u32(1)), "GGUF v1 is obsolete"),
    ("version-4", ("version", u32(4)), "version at byte 4: expected 2 or 3"),
    ("big-endian", ("version", struct.pack(">I", 3)), "big-endian"),
    ("tensor-count-huge", ("n_tensors", u64(2**63)), "tensor count at byte 8"),
    ("kv-count-huge", ("n_kv", u64(2**64 - 1)), "metadata count at byte 16"),
    ("key-length-huge", ("key0_len", u64(2**62)), "metadata entry 0 key"),
    ("string-length-huge", ("str_len", u64(2**40)), "metadata 'k.str'"),
    ("string-not-utf8", ("str_data", b"\xff"), "expected UTF-8"),
    ("value-type-unknown", ("str_type", u32(13)), "expected a value type 0..12"),
    ("bool-not-0-or-1", ("bool", b"\x02"), "expected a bool"),
    ("array-elem-type-unknown", ("arr_type", u32(99)), "expected an element type"),
    ("array-length-huge", ("arr_len", u64(2**61)), "do not fit"),
    ("array-string-length-huge", ("strs_elem_len", u64(2**50)), "k.strs'[0]"),
    ("duplicate-key", ("u32_key", b"k.str"), "duplicate of entry"),
    ("key-with-nul", ("u32_key", b"k\0u"), "NUL"),
    ("alignment-not-pow2", ("align", u32(48)), "power of two"),
    ("alignment-zero", ("align", u32(0)), "power of two"),
    ("alignment-wrong-type", ("align_type", u32(5)), "expected type uint32"),
    ("ndims-0", ("a_ndims", u32(0)), "n_dims"),
    ("ndims-5", ("a_ndims", u32(5)), "n_dims"),
    ("dim-zero", ("a_dim0", u64(0)), "dims[0]"),
    ("dim-negative", ("a_dim1", u64(2**63)), "dims[1]"),
    ("element-count-overflow", lambda d, o: patch(patch(d, o["a_dim0"], u64(2**40)), o["a_dim1"], u64(2**40)),
     "element count overflows int64"),
    ("byte-count-overflow", lambda d, o: patch(patch(d, o["a_dim0"], u64(2**31)), o["a_dim1"], u64(2**31)),
     "byte count overflows int64"),
    ("type-removed", ("a_type", u32(4)), "known ggml type id"),
    ("type-unknown", ("a_type", u32(1000)), "known ggml type id"),
    ("row-not-multiple-of-block", ("b_dim0", u64(48)), "block size"),
    ("offset-unaligned", ("b_offset", u64(100)), "multiple of the alignment"),
    ("offset-outside-file", ("b_offset", u64(2**20)), "data section holds only"),
    ("offset-wraps", ("b_offset", u64(2**64 - 64)), "data section holds only"),
    ("tensors-overlap", ("b_offset", u64(64)), "overlaps tensor 'a'"),
    ("duplicate-tensor-name", ("b_name", b"a"), "duplicate of tensor 0"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_malformed(valid, case):
    data, off = valid
    _, how, expected = case
    bad = how(data, off) if callable(how) else patch(data, off[how[0]], how[1])
    assert bad != data
    with pytest.raises(GGUFError) as e:
        GGUFFile(bad)
    msg = str(e.value)
    assert expected in msg, msg
    assert "at byte" in msg, msg
    assert isinstance(e.value, ValueError)


def test_valid_fixture_loads(valid):
    data, _ = valid
    with GGUFFile(data) as f:
        assert f.alignment == 64 and list(f.tensors) == ["a", "b"]


def test_every_truncation_raises(valid):
    data, off = valid
    for n in range(0, off["data"] + 1):  # every cut through header, metadata and tensor infos
        with pytest.raises(GGUFError):
            GGUFFile(data[:n])
    with pytest.raises(GGUFError, match="truncated"):
        GGUFFile(data[: off["data"] + 128 + 34 - 1])  # tensor b (34 bytes at data offset 128) loses a byte


def test_file_on_disk_names_offset(valid, tmp_path):
    data, off = valid
    p = tmp_path / "bad.gguf"
    p.write_bytes(patch(data, off["a_dim0"], u64(0)))
    with pytest.raises(GGUFError, match=rf"tensor 'a' dims\[0\] at byte {off['a_dim0']}: expected 1"):
        GGUFFile(p)


def mutate(data: bytes, rng: np.random.Generator, header_end: int) -> bytes:
    """One random mutation: bit flips, random bytes, a truncation, a huge count field, or inserted bytes."""
    m = bytearray(data)
    region = header_end if rng.random() < 0.75 else len(m)
    kind = rng.integers(5)
    for _ in range(rng.integers(1, 5)):
        at = int(rng.integers(region))
        if kind == 0:
            m[at] ^= 1 << int(rng.integers(8))
        elif kind == 1:
            m[at] = int(rng.integers(256))
        elif kind == 2:
            return bytes(m[:at])
        elif kind == 3:
            huge = [2**64 - 1, 2**63, 2**32, 2**32 - 1, 0][int(rng.integers(5))]
            m[at:at + 8] = u64(huge)[: len(m) - at]
        else:
            m[at:at] = rng.integers(0, 256, size=int(rng.integers(1, 9)), dtype=np.uint8).tobytes()
    return bytes(m)


def test_fuzz_mutants_load_or_raise(stories_path):
    """10,000 mutants of the real model: each loads completely or raises GGUFError."""
    data = stories_path.read_bytes()
    header_end = GGUFFile(data).data_offset
    rng = np.random.default_rng(20261203)
    loaded = rejected = 0
    for _ in range(10_000):
        m = mutate(data, rng, header_end)
        try:
            f = GGUFFile(m)
        except GGUFError:
            rejected += 1
            continue
        loaded += 1
        meta = f.metadata  # converts every value
        assert isinstance(meta, dict)
        for name in f.tensors:
            raw = f.raw(name)
            assert raw.nbytes == f.tensors[name].nbytes
            int(raw[-1])
    assert loaded + rejected == 10_000
    assert loaded > 500 and rejected > 5000  # the mutations exercise both outcomes
