"""``.pt`` checkpoints in PyTorch's own zip format: gg.save → torch.load(weights_only=True),
torch.save → gg.load (without torch), and refusals of hostile or damaged files."""
from __future__ import annotations

import collections
import io
import os
import pickle
import pickletools
import subprocess
import sys
import zipfile

import numpy as np
import pytest
import torch

import ggmlgrad as gg
from ggmlgrad.io import CheckpointError, UnsafeCheckpointError

_TORCH_OF = {gg.float32: torch.float32, gg.float16: torch.float16, gg.bfloat16: torch.bfloat16,
             gg.int32: torch.int32, gg.bool: torch.bool}


def _values(t) -> np.ndarray:
    return t.detach().float().numpy() if t.dtype in (gg.bfloat16, torch.bfloat16) else t.detach().numpy()


def test_gg_save_is_read_by_torch_weights_only(tmp_path):
    rng = np.random.default_rng(0)
    model = gg.nn.Sequential(gg.nn.Linear(3, 4), gg.nn.ReLU(), gg.nn.Linear(4, 2))
    leaves = {"f32": gg.tensor(rng.standard_normal((2, 3))), "f16": gg.tensor([1.5, -2.25], dtype=gg.float16),
              "bf16": gg.tensor([1.5, -3.0, 1e30]).to(gg.bfloat16), "i32": gg.tensor([1, -5, 2**31 - 1]),
              "bool": gg.tensor([True, False, True]), "empty": gg.zeros(0, 3), "scalar": gg.tensor(2.5),
              "grad": gg.ones(2, requires_grad=True)}
    obj = {"model": model.state_dict(), "leaves": leaves, "step": 3, "lr": 0.5, "name": "run",
           "nested": [1, None, (2, "x"), {"k": [gg.tensor([7.0])]}], "dtype": gg.int64,
           "od": collections.OrderedDict(b=1, a=2), "inf": float("inf"), "np": np.float32(1.25)}
    gg.save(obj, tmp_path / "ckpt.pt")
    back = torch.load(tmp_path / "ckpt.pt", weights_only=True)
    for k, v in leaves.items():
        tv = back["leaves"][k]
        assert tv.dtype == _TORCH_OF[v.dtype] and tuple(tv.shape) == v.shape, k
        np.testing.assert_array_equal(_values(tv), _values(v))
        assert tv.requires_grad == v.requires_grad
    assert back["step"] == 3 and back["lr"] == 0.5 and back["name"] == "run" and back["inf"] == float("inf")
    assert back["nested"][:3] == [1, None, (2, "x")] and back["nested"][3]["k"][0].tolist() == [7.0]
    assert back["dtype"] is torch.int32 and back["np"] == 1.25
    assert type(back["od"]) is collections.OrderedDict and list(back["od"]) == ["b", "a"]
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.ReLU(), torch.nn.Linear(4, 2))
    tmodel.load_state_dict(back["model"])
    x = rng.standard_normal((5, 3)).astype(np.float32)
    np.testing.assert_allclose(tmodel(torch.tensor(x)).detach().numpy(), model(gg.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)
    with zipfile.ZipFile(tmp_path / "ckpt.pt") as z:   # storages 64-byte aligned, as torch writes them
        for info in z.infolist():
            if "/data/" in info.filename:
                local = 30 + len(info.filename.encode()) + len(info.extra)
                assert (info.header_offset + local) % 64 == 0


def test_torch_save_is_read_by_gg_load(tmp_path):
    tmodel = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    opt = torch.optim.Adam(tmodel.parameters())
    tmodel(torch.ones(2, 3)).sum().backward()
    opt.step()
    base = torch.arange(12.0).reshape(3, 4)
    obj = {"model": tmodel.state_dict(), "opt": opt.state_dict(), "long": torch.arange(-3, 3),
           "f64": torch.tensor([0.1, 1e300], dtype=torch.float64), "i16": torch.tensor([-7, 9], dtype=torch.int16),
           "u8": torch.tensor([0, 255], dtype=torch.uint8), "i8": torch.tensor([-128], dtype=torch.int8),
           "half": torch.tensor([0.5, 65504.0], dtype=torch.float16),
           "bf16": torch.tensor([1.5, -2.0], dtype=torch.bfloat16), "bool": torch.tensor([True, False]),
           "view": base[:, 1::2], "shared": (base[0], base[2]), "param": torch.nn.Parameter(torch.ones(2)),
           "dtype": torch.float64, "size": torch.Size([2, 3]), "device": torch.device("cpu"), "bytes": b"ab"}
    torch.save(obj, tmp_path / "t.pth")
    back = gg.load(tmp_path / "t.pth")
    expect = {"long": (gg.int32, [-3, -2, -1, 0, 1, 2]), "f64": (gg.float32, np.float32([0.1, np.inf]).tolist()),
              "i16": (gg.int32, [-7, 9]), "u8": (gg.int32, [0, 255]), "i8": (gg.int32, [-128]),
              "half": (gg.float16, [0.5, 65504.0]), "bf16": (gg.bfloat16, [1.5, -2.0]),
              "bool": (gg.bool, [True, False]), "view": (gg.float32, [[1.0, 3.0], [5.0, 7.0], [9.0, 11.0]])}
    for k, (dt, vals) in expect.items():
        assert back[k].dtype is dt, k
        assert _values(back[k]).tolist() == vals, k
    assert [t.tolist() for t in back["shared"]] == [[0.0, 1.0, 2.0, 3.0], [8.0, 9.0, 10.0, 11.0]]
    assert back["param"].requires_grad and not back["long"].requires_grad
    assert back["dtype"] is gg.float32 and back["size"] == (2, 3) and back["device"] == gg.device("cpu")
    assert back["bytes"] == b"ab"
    st = back["opt"]["state"][0]
    np.testing.assert_array_equal(st["exp_avg"].numpy(), opt.state_dict()["state"][0]["exp_avg"].numpy())
    model = gg.nn.Sequential(gg.nn.Linear(3, 4), gg.nn.Tanh(), gg.nn.Linear(4, 2))
    model.load_state_dict(back["model"])
    x = np.random.default_rng(1).standard_normal((4, 3)).astype(np.float32)
    np.testing.assert_allclose(model(gg.tensor(x)).detach().numpy(), tmodel(torch.tensor(x)).detach().numpy(),
                               rtol=1e-5, atol=1e-6)


def test_file_objects_and_every_format(tmp_path):
    obj = {"w": gg.tensor([1.0, 2.0]), "n": 4}
    buf = io.BytesIO()
    gg.save(obj, buf)
    buf.seek(0)
    assert torch.load(buf, weights_only=True)["w"].tolist() == [1.0, 2.0]
    buf.seek(0)
    back = gg.load(buf)
    assert back["w"].tolist() == [1.0, 2.0] and back["n"] == 4
    tbuf = io.BytesIO()
    torch.save({"w": torch.tensor([3.0])}, tbuf)
    tbuf.seek(0)
    assert gg.load(tbuf)["w"].tolist() == [3.0]
    for ext in ("safetensors", "gguf"):        # those formats through file objects too
        path = tmp_path / f"w.{ext}"
        gg.save(obj, path)
        with open(path, "rb") as f:
            assert gg.load(f)["w"].tolist() == [1.0, 2.0]
    gg.save(obj, tmp_path / "model.bin")       # any other name: torch's format, as torch.save
    assert gg.load(tmp_path / "model.bin", map_location="cpu")["n"] == 4
    assert torch.load(tmp_path / "model.bin", weights_only=True)["n"] == 4


def test_save_refuses_what_torch_weights_only_would_not_read(tmp_path):
    with pytest.raises(TypeError, match="NumPy array"):
        gg.save({"a": np.zeros(2)}, tmp_path / "a.pt")
    with pytest.raises(TypeError, match=r"state_dict\(\)"):
        gg.save(gg.nn.Linear(2, 2), tmp_path / "m.pt")
    assert not (tmp_path / "a.pt").exists() and not (tmp_path / "m.pt").exists()


class _Evil:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def _zip_with_pickle(path, payload: bytes) -> None:
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("archive/data.pkl", payload)
        z.writestr("archive/byteorder", b"little")
        z.writestr("archive/version", b"3\n")


def test_a_malicious_pickle_is_refused_naming_what_it_asked_for(tmp_path):
    path = tmp_path / "evil.pt"
    _zip_with_pickle(path, pickle.dumps({"w": _Evil()}, protocol=2))
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        with pytest.raises(UnsafeCheckpointError, match=r"posix\.system|os\.system") as e:
            gg.load(path)
    finally:
        os.chdir(cwd)
    assert isinstance(e.value, pickle.UnpicklingError) and isinstance(e.value, CheckpointError)
    assert not (tmp_path / "PWNED").exists()
    with pytest.raises(pickle.UnpicklingError):   # torch refuses the same file
        torch.load(path, weights_only=True)
    _zip_with_pickle(path, pickle.dumps(collections.Counter("ab"), protocol=2))
    with pytest.raises(UnsafeCheckpointError, match="collections.Counter"):
        gg.load(path)


def test_damaged_checkpoints_raise_checkpoint_error(tmp_path):
    path = tmp_path / "t.pt"
    torch.save({"w": torch.arange(6.0)}, path)
    raw = path.read_bytes()
    with zipfile.ZipFile(path) as z:
        names = z.namelist()
        members = {n: z.read(n) for n in names}
    data_key = next(n for n in names if n.endswith("data/0"))
    short = tmp_path / "short.pt"                    # a storage shorter than its tensors need
    with zipfile.ZipFile(short, "w") as z:
        for n, b in members.items():
            z.writestr(n, b[:8] if n == data_key else b)
    with pytest.raises(CheckpointError, match="bytes"):
        gg.load(short)
    big = tmp_path / "big.pt"                         # a tensor whose strides reach past its storage
    torch.save({"w": torch.arange(10.0).as_strided((2, 2), (5, 1))}, big)
    with zipfile.ZipFile(big) as z:
        members = {n: z.read(n) for n in z.namelist()}
    pkl_key = next(n for n in members if n.endswith("data.pkl"))
    numel_at = next(pos for op, arg, pos in pickletools.genops(members[pkl_key]) if op.name == "BININT1" and arg == 10)
    pkl = bytearray(members[pkl_key])
    pkl[numel_at + 1] = 4                             # the storage now claims 4 elements
    with zipfile.ZipFile(big, "w") as z:
        for n, b in members.items():
            z.writestr(n, bytes(pkl) if n == pkl_key else b)
    with pytest.raises(CheckpointError, match="past its storage"):
        gg.load(big)
    huge = tmp_path / "huge.pt"
    torch.save({"w": torch.tensor([2**40])}, huge)
    with pytest.raises(CheckpointError, match="int32"):
        gg.load(huge)
    five = tmp_path / "five.pt"
    torch.save({"w": torch.zeros(1, 1, 1, 1, 2)}, five)
    with pytest.raises(CheckpointError, match="at most 4"):
        gg.load(five)
    (tmp_path / "trunc.pt").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(CheckpointError):
        gg.load(tmp_path / "trunc.pt")
    (tmp_path / "legacy.pt").write_bytes(pickle.dumps({"w": 1}))
    with pytest.raises(CheckpointError, match="legacy"):
        gg.load(tmp_path / "legacy.pt")


def test_gg_load_reads_torch_checkpoints_without_torch(tmp_path):
    path = tmp_path / "t.pt"
    torch.save({"w": torch.tensor([[1.0, 2.0]]), "i": torch.arange(3)}, path)
    code = ("import sys; sys.modules['torch'] = None\n"        # any import of torch fails
            "import ggmlgrad as gg\n"
            f"d = gg.load({str(path)!r})\n"
            "print(d['w'].tolist(), d['i'].tolist(), 'torch' in sys.modules and sys.modules['torch'] is not None)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "GGML_NO_BACKTRACE": "1"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[[1.0, 2.0]] [0, 1, 2] False"


def test_docstring_examples_run():
    import doctest
    import importlib
    result = doctest.testmod(importlib.import_module("ggmlgrad.io.torch_format"))
    assert result.failed == 0 and result.attempted > 0
