"""Fuzzing gg.load over .safetensors and .gguf bytes: truncation at every section, flipped bytes,
wrong dtypes, more than 4 dimensions, huge declared sizes, negative and overlapping offsets.

Every case must either raise CheckpointError (a ValueError) naming the file, or load exactly the
values that were saved (a harmless change such as a flipped padding byte). The loads run in a child
process with a capped address space, so a ggml abort or a huge allocation fails the test and the
last case printed before it names the culprit. Deterministic cases cover every section of both
formats; seeded random mutations (flips, cuts, insertions, huge u64 fields) add a few hundred more.
"""
from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
import zlib

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.io import CheckpointError

HERE = os.path.abspath(__file__)
ADDRESS_SPACE = 4 << 30          # the child may map this much more: a huge declared size must not be allocated


# ---------------------------------------------------------------------- file builders
def st_bytes(header: dict, data: bytes, header_len: int | None = None) -> bytes:
    """A .safetensors file from a header dict and the data section (``header_len`` overrides the length)."""
    h = json.dumps(header).encode()
    return struct.pack("<Q", len(h) if header_len is None else header_len) + h + data


def _gguf_str(s: str | bytes) -> bytes:
    b = s.encode() if isinstance(s, str) else s
    return struct.pack("<Q", len(b)) + b


def gguf_bytes(tensors, kv=(), *, version=3, n_tensors=None, n_kv=None, alignment=32, magic=b"GGUF") -> bytes:
    """A .gguf file. ``tensors``: (name, numpy shape, ggml type, offset, data bytes); ``kv``: raw
    encoded pairs. ``n_tensors``/``n_kv`` override the counts."""
    head = magic + struct.pack("<IQQ", version, len(tensors) if n_tensors is None else n_tensors,
                               len(kv) if n_kv is None else n_kv)
    head += b"".join(kv)
    for name, shape, gtype, offset, _ in tensors:
        dims = tuple(reversed(shape))
        head += _gguf_str(name) + struct.pack(f"<I{len(dims)}QIQ", len(dims), *dims, gtype, offset)
    pad = -len(head) % alignment
    body = b""
    for _, _, _, offset, data in sorted(tensors, key=lambda t: t[3]):
        if data:    # tensors given no data declare offsets past the end
            body += b"\0" * (offset - len(body)) + data
    return head + b"\0" * pad + body


def kv_u32(key: str, v: int) -> bytes:
    return _gguf_str(key) + struct.pack("<II", 4, v)


def kv_str(key: str, v: str | bytes, length: int | None = None) -> bytes:
    b = v.encode() if isinstance(v, str) else v
    return _gguf_str(key) + struct.pack("<IQ", 8, len(b) if length is None else length) + b


def kv_array(key: str, item_type: int, n: int, payload: bytes) -> bytes:
    return _gguf_str(key) + struct.pack("<IIQ", 9, item_type, n) + payload


F32 = np.arange(6, dtype=np.float32).reshape(2, 3)


def foreign_st(arrays: dict) -> bytes:
    header, data = {}, b""
    codes = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}
    for k, a in arrays.items():
        header[k] = {"dtype": codes[a.dtype], "shape": list(a.shape), "data_offsets": [len(data), len(data) + a.nbytes]}
        data += a.tobytes()
    return st_bytes(header, data)


def foreign_gguf(arrays: dict, **kw) -> bytes:
    types = {np.dtype(np.float32): 0, np.dtype(np.float16): 1}
    tensors, off = [], 0
    for k, a in arrays.items():
        tensors.append((k, a.shape, types[a.dtype], off, a.tobytes()))
        off += -(-a.nbytes // 32) * 32
    return gguf_bytes(tensors, **kw)


# ---------------------------------------------------------------------- the cases
def _saved_state():
    """What the gg.save files hold: tensors of three dtypes, an empty one, an ndarray, plain values."""
    return {"w": gg.tensor(F32), "b": gg.tensor([0.5, -1.5], dtype=gg.bfloat16),
            "i": gg.tensor([[1, 2]], dtype=gg.int32), "e": gg.zeros(0, 3), "arr": np.arange(3, dtype=np.int64),
            "step": 7, "name": "x"}


def _sections(path: str, data: bytes, ext: str) -> list[int]:
    """Interesting truncation lengths of the gg.save file ``path``: every section boundary and its
    neighbours (GGUF sections located by the gguf package's own reader)."""
    if ext == "safetensors":
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        cuts = [0, 1, 4, 7, 8, 9, 8 + n // 2, 8 + n - 1, 8 + n]
        for name, spec in header.items():
            if name != "__metadata__":
                b, e = spec["data_offsets"]
                cuts += [8 + n + b, 8 + n + (b + e) // 2, 8 + n + e - 1]
    else:
        from gguf import GGUFReader
        r = GGUFReader(path)
        cuts = [0, 2, 4, 6, 8, 12, 16, 20, 24]
        cuts += [int(f.offset) + d for f in r.fields.values() for d in (0, 1, 8, 12)]
        cuts += [int(t.field.offset) + d for t in r.tensors for d in (0, 4, 9, 12, 20)]
        cuts += [int(t.data_offset) + d for t in r.tensors for d in (0, 1, int(t.n_bytes) - 1)]
        cuts += [int(r.data_offset) - 1, int(r.data_offset) - 8]
    return sorted({c for c in cuts if 0 <= c < len(data)} | set(range(len(data) - 8, len(data))))


def _deterministic_cases(folder: str) -> list[dict]:
    """(id, file, expect): 'error' must raise; 'same' may raise or must load equal to ``ref``."""
    cases: list[dict] = []

    def add(case_id: str, ext: str, data: bytes, expect: str, ref: str | None = None):
        path = os.path.join(folder, f"c{len(cases)}.{ext}")
        with open(path, "wb") as f:
            f.write(data)
        tensor = "a" if expect == "error:a" else None     # the error must name this tensor too
        cases.append({"id": case_id, "path": path, "expect": expect.split(":")[0], "ref": ref, "tensor": tensor})

    for ext in ("safetensors", "gguf"):
        ref = os.path.join(folder, f"ref.{ext}")
        gg.save(_saved_state(), ref)
        data = open(ref, "rb").read()
        for cut in _sections(ref, data, ext):
            # cutting the gguf's trailing padding loses nothing; everything else must be refused
            add(f"{ext}: truncated to {cut} of {len(data)} bytes", ext, data[:cut], "same", ref)
        for i in range(0, len(data), max(1, len(data) // 150)):
            flipped = bytearray(data)
            flipped[i] ^= 0xFF
            add(f"{ext}: byte {i} of {len(data)} flipped", ext, bytes(flipped), "same", ref)

    # safetensors headers
    ok = {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}
    raw = F32.tobytes()
    add("st: header length 2**63", "safetensors", st_bytes({"a": ok}, raw, 2**63), "error")
    add("st: header length past the end", "safetensors", st_bytes({"a": ok}, raw, 10**6), "error")
    add("st: header is a list", "safetensors", st_bytes([1], raw), "error")  # type: ignore[arg-type]
    add("st: entry is a string", "safetensors", st_bytes({"a": "x"}, raw), "error:a")
    add("st: unknown dtype", "safetensors", st_bytes({"a": {**ok, "dtype": "Q4"}}, raw), "error:a")
    add("st: dtype not a string", "safetensors", st_bytes({"a": {**ok, "dtype": 3}}, raw), "error:a")
    add("st: dtype F16 for 24 bytes of 2x3", "safetensors", st_bytes({"a": {**ok, "dtype": "F16"}}, raw), "error:a")
    add("st: dtype F64 for 24 bytes of 2x3", "safetensors", st_bytes({"a": {**ok, "dtype": "F64"}}, raw), "error:a")
    add("st: bool dtype, 3 bytes for 2 values", "safetensors",     # bool loads (gg.bool); a size mismatch does not
        st_bytes({"a": {"dtype": "BOOL", "shape": [2], "data_offsets": [0, 3]}}, b"\1\0\1"), "error:a")
    add("st: 5-D tensor", "safetensors", foreign_st({"a": F32.reshape(1, 1, 2, 1, 3)}), "error:a")
    add("st: 6-D tensor", "safetensors", foreign_st({"a": F32.reshape(1, 1, 1, 2, 1, 3)}), "error:a")
    add("st: huge shape", "safetensors", st_bytes({"a": {**ok, "shape": [2**40, 2**40]}}, raw), "error:a")
    add("st: huge end offset", "safetensors", st_bytes({"a": {**ok, "data_offsets": [0, 2**62]}}, raw), "error:a")
    add("st: negative offset", "safetensors", st_bytes({"a": {**ok, "data_offsets": [-8, 16]}}, raw), "error:a")
    add("st: negative dim", "safetensors", st_bytes({"a": {**ok, "shape": [-2, -3]}}, raw), "error:a")
    add("st: float dim", "safetensors", st_bytes({"a": {**ok, "shape": [2.0, 3]}}, raw), "error:a")
    add("st: offsets reversed", "safetensors", st_bytes({"a": {**ok, "data_offsets": [24, 0]}}, raw), "error:a")
    add("st: overlapping tensors", "safetensors",
        st_bytes({"a": ok, "b": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}}, raw), "error:a")
    add("st: hole in the data", "safetensors", st_bytes({"a": {**ok, "shape": [3], "data_offsets": [12, 24]}}, raw),
        "error")
    add("st: metadata not strings", "safetensors", st_bytes({"__metadata__": {"k": 1}, "a": ok}, raw), "error")
    add("st: int64 beyond int32", "safetensors", foreign_st({"a": np.array([2**40], np.int64)}), "error:a")

    # gguf structure
    t = ("a", (2, 3), 0, 0, raw)
    add("gguf: wrong magic", "gguf", gguf_bytes([t], magic=b"GGUG"), "error")
    add("gguf: version 1", "gguf", gguf_bytes([t], version=1), "error")
    add("gguf: big-endian version", "gguf", gguf_bytes([t], version=3 << 24), "error")
    add("gguf: tensor count 2**63", "gguf", gguf_bytes([t], n_tensors=2**63), "error")
    add("gguf: kv count 2**60", "gguf", gguf_bytes([t], n_kv=2**60), "error")
    add("gguf: string length 2**62", "gguf", gguf_bytes([t], [kv_str("k", "v", 2**62)]), "error")
    add("gguf: array length 2**62", "gguf", gguf_bytes([t], [kv_array("k", 4, 2**62, b"")]), "error")
    add("gguf: string array length 2**62", "gguf", gguf_bytes([t], [kv_array("k", 8, 2**62, b"")]), "error")
    add("gguf: deeply nested arrays", "gguf", gguf_bytes([t], [kv_array("k", 9, 1, struct.pack("<IQ", 9, 1) * 40)]),
        "error")
    add("gguf: unknown value type", "gguf", gguf_bytes([t], [_gguf_str("k") + struct.pack("<I", 77)]), "error")
    add("gguf: non-UTF-8 key", "gguf", gguf_bytes([t], [_gguf_str(b"\xff\xfe") + struct.pack("<II", 4, 1)]), "error")
    add("gguf: alignment 0", "gguf", gguf_bytes([t], [kv_u32("general.alignment", 0)]), "error")
    add("gguf: alignment 3", "gguf", gguf_bytes([t], [kv_u32("general.alignment", 3)], alignment=3), "error")
    add("gguf: quantized tensor", "gguf", gguf_bytes([("a", (32,), 2, 0, b"\0" * 18)]), "error:a")
    add("gguf: unknown tensor type", "gguf", gguf_bytes([("a", (2, 3), 999, 0, raw)]), "error:a")
    add("gguf: 5-D tensor", "gguf", foreign_gguf({"a": F32.reshape(1, 2, 1, 1, 3)}), "error:a")
    add("gguf: 17 dims", "gguf", gguf_bytes([("a", (1,) * 17, 0, 0, b"\0" * 4)]), "error:a")
    add("gguf: huge dims", "gguf", gguf_bytes([("a", (2**31, 2**31, 2**31), 0, 0, raw)]), "error:a")
    add("gguf: offset 2**64-32 (negative)", "gguf", gguf_bytes([("a", (2, 3), 0, 2**64 - 32, b"")]), "error:a")
    add("gguf: offset past the end", "gguf", gguf_bytes([("a", (2, 3), 0, 2**40, b"")]), "error:a")
    add("gguf: misaligned offset", "gguf", gguf_bytes([("a", (2, 3), 0, 4, b"\0" * 4 + raw)]), "error:a")
    add("gguf: overlapping tensors", "gguf",
        gguf_bytes([("a", (2, 3), 0, 0, raw), ("b", (3,), 0, 0, raw[:12])]), "error:a")
    add("gguf: duplicate tensor names", "gguf",
        gguf_bytes([("a", (3,), 0, 0, raw[:12]), ("a", (3,), 0, 32, raw[12:])]), "error:a")
    add("gguf: last tensor truncated by one byte", "gguf", foreign_gguf({"a": F32})[:-1 - 8], "error:a")
    add("gguf: metadata key not a string", "gguf", gguf_bytes([t], [kv_u32("ggmlgrad.state", 1)]), "error")
    add("gguf: metadata JSON corrupt", "gguf", gguf_bytes([t], [kv_str("ggmlgrad.state", "{nope")]), "error")
    add("gguf: metadata of a newer version", "gguf",
        gguf_bytes([t], [kv_str("ggmlgrad.state", '{"version": 99, "skeleton": {}, "tensors": []}')]), "error")
    return cases


# ---------------------------------------------------------------------- the child
def _equal(a, b) -> bool:
    """Exact equality of two loaded nests (tensor bits included)."""
    if isinstance(a, gg.Tensor) or isinstance(b, gg.Tensor):
        return (isinstance(a, gg.Tensor) and isinstance(b, gg.Tensor) and a.dtype is b.dtype and a.shape == b.shape
                and a.numpy().tobytes() == b.numpy().tobytes())
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (isinstance(a, np.ndarray) and isinstance(b, np.ndarray) and a.dtype == b.dtype
                and a.shape == b.shape and a.tobytes() == b.tobytes())
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return type(a) is type(b) and a == b


def check_one(path: str, expect: str, ref, tensor: str | None = None) -> str:
    """'' when the load behaved, else what went wrong."""
    try:
        got = gg.load(path)
    except CheckpointError as e:
        if path not in str(e):
            return f"error does not name the file: {e}"
        return "" if tensor is None or f"'{tensor}'" in str(e) else f"error does not name tensor {tensor!r}: {e}"
    except Exception as e:  # noqa: BLE001 - anything but CheckpointError is a finding
        return f"raised {type(e).__name__} instead of CheckpointError: {e}"
    if expect == "same" and ref is not None and _equal(got, ref):
        return ""
    return "loaded without an error" + (" but with different values" if expect == "same" else "")


def _limit_memory() -> None:
    """Cap the child's address space at what it maps now (the device is up) plus a few GiB: a
    declared size that got allocated would fail the case instead of swapping the machine."""
    gg.zeros(1).numpy()                   # bring the device up first (GPU runtimes map a lot)
    try:
        import resource
        with open("/proc/self/statm") as f:
            mapped = int(f.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")
        limit = mapped + ADDRESS_SPACE
        resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    except (ImportError, ValueError, OSError):   # not Linux: the size checks still run, unguarded
        pass


def run_cases(case_file: str) -> int:
    cases = json.load(open(case_file))
    refs: dict = {}
    failures = []
    for c in cases:
        print(f"CASE {c['id']} ({c['path']})", file=sys.stderr, flush=True)
        ref = c["ref"] and refs.setdefault(c["ref"], gg.load(c["ref"]))
        problem = check_one(c["path"], c["expect"], ref, c["tensor"])
        if problem:
            failures.append(f"{c['id']}: {problem}")
    print(json.dumps({"n": len(cases), "failures": failures}))
    return 0


def mutate(raw: bytes, rng: np.random.Generator) -> bytes:
    """One to three random edits: bit flips, byte sets, cuts, insertions, plausible huge u64 fields."""
    b = bytearray(raw)
    for _ in range(rng.integers(1, 4)):
        kind = rng.choice(["flip", "set", "cut", "insert", "u64"])
        i = int(rng.integers(0, max(len(b), 1)))
        if kind == "flip" and b:
            b[i] ^= 1 << int(rng.integers(0, 8))
        elif kind == "set" and b:
            b[i] = int(rng.integers(0, 256))
        elif kind == "cut":
            del b[i:]
        elif kind == "insert":
            b[i:i] = rng.bytes(int(rng.integers(1, 9)))
        elif kind == "u64" and len(b) >= i + 8:   # a huge length, count, dim or offset where one may be
            b[i:i + 8] = struct.pack("<Q", int(rng.choice([2**63, 2**40, 2**32 - 1, 0])))
    return bytes(b)


def run_random(folder: str, n: int) -> int:
    """``n`` seeded random mutations of a saved file of each format."""
    rng = np.random.default_rng(1234)
    failures = []
    for ext in ("safetensors", "gguf"):
        ref_path = os.path.join(folder, f"rand_ref.{ext}")
        gg.save(_saved_state(), ref_path)
        raw, ref = open(ref_path, "rb").read(), gg.load(ref_path)
        path = os.path.join(folder, f"rand.{ext}")
        for k in range(n):
            data = mutate(raw, rng)
            with open(path, "wb") as f:
                f.write(data)
            print(f"CASE random {ext} #{k} len={len(data)} crc32={zlib.crc32(data)}", file=sys.stderr, flush=True)
            problem = check_one(path, "same", ref)
            if problem:
                failures.append(f"random {ext} #{k} ({data[:48]!r}...): {problem}")
    print(json.dumps({"n": 2 * n, "failures": failures}))
    return 0


def _run_child(*args: str, timeout: int = 120) -> dict:
    env = dict(os.environ, GGML_NO_BACKTRACE="1")
    try:
        p = subprocess.run([sys.executable, HERE, *args], capture_output=True, text=True, timeout=timeout, env=env)
        stderr, rc = p.stderr, p.returncode
    except subprocess.TimeoutExpired as e:   # a load that hangs (or allocates forever) is a finding too
        stderr, rc = (e.stderr or b"").decode() if isinstance(e.stderr, bytes) else (e.stderr or ""), "timeout"
        p = None
    last_case = [ln for ln in stderr.splitlines() if ln.startswith("CASE ")][-1:]
    assert rc == 0, f"the fuzz child died (rc {rc}) at {last_case}:\n{stderr[-3000:]}"
    return json.loads(p.stdout.strip().splitlines()[-1])


# ---------------------------------------------------------------------- the tests
def test_deterministic_corruptions_raise_clear_errors(tmp_path):
    cases = _deterministic_cases(str(tmp_path))
    case_file = tmp_path / "cases.json"
    case_file.write_text(json.dumps(cases))
    out = _run_child("cases", str(case_file))
    assert out["n"] == len(cases) and len(cases) > 300
    assert sum(c["tensor"] is not None for c in cases) >= 25
    assert out["failures"] == []


def test_random_mutations_raise_clear_errors(tmp_path):
    out = _run_child("random", str(tmp_path), "200")
    assert out["n"] == 400
    assert out["failures"] == []


def test_case_checker_can_fail(tmp_path):
    """The checker itself flags a silent wrong answer and a foreign exception."""
    good = tmp_path / "g.safetensors"
    gg.save({"w": gg.tensor([1.0, 2.0])}, good)
    other = tmp_path / "o.safetensors"
    gg.save({"w": gg.tensor([1.0, 3.0])}, other)
    assert "different values" in check_one(str(other), "same", gg.load(good))
    assert check_one(str(good), "error", None) == "loaded without an error"
    assert check_one(str(good), "same", gg.load(good)) == ""
    five = tmp_path / "five.safetensors"
    five.write_bytes(foreign_st({"deep": F32.reshape(1, 1, 2, 1, 3)}))
    assert check_one(str(five), "error", None, tensor="deep") == ""
    assert "does not name tensor 'other'" in check_one(str(five), "error", None, tensor="other")


def test_named_tensor_in_errors(tmp_path):
    """Where the tensor is known, the error names it (and the file)."""
    p = tmp_path / "five.safetensors"
    p.write_bytes(foreign_st({"deep.weight": F32.reshape(1, 1, 2, 1, 3)}))
    with pytest.raises(CheckpointError, match=r"five\.safetensors.*'deep\.weight'.*5 dimensions"):
        gg.load(p)
    q = tmp_path / "trunc.gguf"
    q.write_bytes(foreign_gguf({"a": F32, "blk.0.w": F32})[:-9])
    with pytest.raises(CheckpointError, match=r"trunc\.gguf.*'blk\.0\.w'.*past the end"):
        gg.load(q)
    r = tmp_path / "big.gguf"
    r.write_bytes(gguf_bytes([("huge", (2**31, 2**31, 2**31), 0, 0, F32.tobytes())]))
    with pytest.raises(CheckpointError, match=r"big\.gguf.*'huge'.*past the end"):
        gg.load(r)


def test_failed_load_changes_no_model_or_optimizer(tmp_path):
    gg.manual_seed(0)
    model = gg.nn.Linear(3, 2)
    opt = gg.optim.Adam(model.parameters(), lr=0.1)
    model(gg.ones(4, 3)).sum().backward()
    opt.step()
    path = tmp_path / "ck.safetensors"
    gg.save({"model": model.state_dict(), "optim": opt.state_dict()}, path)
    before = {k: v.numpy().copy() for k, v in model.state_dict().items()}
    moments = [opt.state[p]["exp_avg"].numpy().copy() for p in model.parameters()]
    data = path.read_bytes()
    for bad in (data[:-3], data[:len(data) // 2], data[:-30] + bytes(30)):
        (tmp_path / "bad.safetensors").write_bytes(bad)
        with pytest.raises(CheckpointError, match="bad.safetensors"):
            ck = gg.load(tmp_path / "bad.safetensors")
            model.load_state_dict(ck["model"])
            opt.load_state_dict(ck["optim"])
        for k, v in model.state_dict().items():
            np.testing.assert_array_equal(v.numpy(), before[k])
        for p, m in zip(model.parameters(), moments):
            np.testing.assert_array_equal(opt.state[p]["exp_avg"].numpy(), m)
        assert all(opt.state[p]["step"] == 1 for p in model.parameters())
    # a file that loads but belongs to another model: validated before anything is assigned
    other = gg.nn.Linear(3, 4)
    other_opt = gg.optim.Adam(other.parameters(), lr=0.1)
    other(gg.ones(1, 3)).sum().backward()
    other_opt.step()
    gg.save({"model": other.state_dict(), "optim": other_opt.state_dict()}, tmp_path / "other.safetensors")
    ck = gg.load(tmp_path / "other.safetensors")
    with pytest.raises(RuntimeError, match="nothing was loaded"):
        model.load_state_dict(ck["model"])
    with pytest.raises(ValueError, match="shape"):
        opt.load_state_dict(ck["optim"])
    for k, v in model.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    for p, m in zip(model.parameters(), moments):
        np.testing.assert_array_equal(opt.state[p]["exp_avg"].numpy(), m)


if __name__ == "__main__":
    _limit_memory()
    sys.exit(run_cases(sys.argv[2]) if sys.argv[1] == "cases" else run_random(sys.argv[2], int(sys.argv[3])))
