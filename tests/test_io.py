"""gg.save / gg.load: bit-exact round trips in both formats, nested optimizer state, atomic writes,
corrupt/truncated files, foreign files, and resume == continue through a file."""
from __future__ import annotations

import os

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad.io import CheckpointError

FORMATS = pytest.mark.parametrize("ext", ["safetensors", "gguf"])


def _bits(t: gg.Tensor) -> np.ndarray:
    a = t.numpy()
    return (a.view(np.uint32) >> 16).astype(np.uint16) if t.dtype is gg.bfloat16 else a.reshape(-1).view(np.uint8)


def _model_state(rng):
    special = np.array([0.0, -0.0, np.inf, -np.inf, 1e-45, 3.4e38, np.nan], np.float32)
    return {
        "layer.0.weight": gg.tensor(rng.standard_normal((4, 3)).astype(np.float32)),
        "layer.0.bias": gg.tensor(special),
        "emb.weight": gg.tensor(rng.standard_normal((5, 2)).astype(np.float32), dtype=gg.bfloat16),
        "half": gg.tensor(rng.standard_normal((2, 2, 2)).astype(np.float16)),
        "index": gg.tensor(np.array([[1, -2], [2**31 - 1, -2**31]], np.int64), dtype=gg.int32),
        "scalar": gg.tensor(3.25),
        "empty": gg.zeros(0, 4),
        "a" * 80: gg.tensor([1.0]),               # longer than GGUF's 63-byte names
    }


@FORMATS
def test_model_state_round_trip_bit_exact(tmp_path, ext):
    sd = _model_state(np.random.default_rng(0))
    path = tmp_path / f"model.{ext}"
    gg.save(sd, path)
    back = gg.load(path)
    assert list(back) == list(sd)
    for k, v in sd.items():
        b = back[k]
        assert isinstance(b, gg.Tensor) and b.dtype is v.dtype and b.shape == v.shape, k
        np.testing.assert_array_equal(_bits(b), _bits(v), err_msg=k)


@FORMATS
def test_bf16_nan_payloads_and_f16_subnormals_preserved(tmp_path, ext):
    # bit patterns chosen directly: NaNs with payloads and sign, subnormals, -0
    bf_bits = np.array([0x7FC1, 0xFFC0, 0x7F81, 0x0001, 0x8000, 0x3F80], np.uint16)
    t = gg.Tensor._blank((6,), gg.bfloat16, gg.get_device())
    gg.engine.new_from_host(t, bf_bits, "test")
    h = gg.tensor(np.array([6e-8, -0.0, 65504.0, np.nan], np.float16))
    path = tmp_path / f"bits.{ext}"
    gg.save({"bf": t, "h": h}, path)
    back = gg.load(path)
    np.testing.assert_array_equal(_bits(back["bf"]), bf_bits)
    np.testing.assert_array_equal(back["h"].numpy().view(np.uint16), h.numpy().view(np.uint16))


@FORMATS
def test_optimizer_state_dict_round_trip(tmp_path, ext):
    w = gg.tensor(np.ones((3, 2), np.float32), requires_grad=True)
    b = gg.tensor(np.ones(2, np.float32), requires_grad=True)
    opt = gg.optim.AdamW([{"params": [w]}, {"params": [b], "lr": 0.5, "betas": (0.8, 0.9)}], lr=0.1)
    ((w * w).sum() + (b * 3).sum()).backward()
    opt.step()
    sd = opt.state_dict()
    path = tmp_path / f"opt.{ext}"
    gg.save(sd, path)
    back = gg.load(path)
    assert set(back) == {"state", "param_groups"}
    assert sorted(back["state"]) == [0, 1]                       # int keys survive
    assert back["param_groups"][1]["betas"] == (0.8, 0.9)        # tuples survive
    assert back["param_groups"][1]["lr"] == 0.5 and back["param_groups"][0]["params"] == [0]
    assert back["param_groups"][0]["fused"] is None
    for i in (0, 1):
        assert back["state"][i]["step"] == 1
        for k in ("exp_avg", "exp_avg_sq"):
            np.testing.assert_array_equal(back["state"][i][k].numpy(), sd["state"][i][k].numpy())


@FORMATS
def test_resume_from_file_equals_continue(tmp_path, ext):
    rng = np.random.default_rng(3)
    x = gg.tensor(rng.standard_normal((16, 3)).astype(np.float32))
    y = gg.tensor(rng.standard_normal((16, 2)).astype(np.float32))

    def make(w0, b0):
        w, b = gg.tensor(w0, requires_grad=True), gg.tensor(b0, requires_grad=True)
        return w, b, gg.optim.Adam([w, b], lr=0.05, weight_decay=0.01)

    def train(w, b, opt, sched, n):
        for _ in range(n):
            opt.zero_grad()
            (((x @ w) + b - y) ** 2).mean().backward()
            opt.step()
            sched.step()

    w, b, opt = make(rng.standard_normal((3, 2)).astype(np.float32), np.zeros(2, np.float32))
    sched = gg.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=20)
    train(w, b, opt, sched, 6)
    path = tmp_path / f"ckpt.{ext}"
    gg.save({"model": {"w": w, "b": b}, "optim": opt.state_dict(), "sched": sched.state_dict()}, path)
    train(w, b, opt, sched, 6)
    ck = gg.load(path)
    w2, b2, opt2 = make(ck["model"]["w"].numpy(), ck["model"]["b"].numpy())
    opt2.load_state_dict(ck["optim"])
    sched2 = gg.optim.lr_scheduler.CosineAnnealingLR(opt2, T_max=20)
    sched2.load_state_dict(ck["sched"])
    train(w2, b2, opt2, sched2, 6)
    np.testing.assert_array_equal(w2.detach().numpy(), w.detach().numpy())
    np.testing.assert_array_equal(b2.detach().numpy(), b.detach().numpy())


@FORMATS
def test_graph_mode_pending_tensors_are_saved(tmp_path, ext):
    with gg.graph_mode(True):
        t = gg.ones(3) * 2          # pending until the save reads it
        gg.save({"t": t}, tmp_path / f"p.{ext}")
    assert gg.load(tmp_path / f"p.{ext}")["t"].tolist() == [2.0, 2.0, 2.0]


@FORMATS
def test_truncated_and_corrupt_files_raise_naming_the_file(tmp_path, ext):
    path = tmp_path / f"m.{ext}"
    gg.save({"w": gg.tensor(np.arange(64, dtype=np.float32)), "n": 1}, path)
    data = path.read_bytes()
    trunc = tmp_path / f"trunc.{ext}"
    trunc.write_bytes(data[:-40])
    with pytest.raises(CheckpointError, match="trunc"):
        gg.load(trunc)
    flipped = bytearray(data)
    flipped[-20] ^= 0xFF                       # inside the tensor data
    bad = tmp_path / f"flip.{ext}"
    bad.write_bytes(bytes(flipped))
    with pytest.raises(CheckpointError, match="flip.*corrupt"):
        gg.load(bad)
    junk = tmp_path / f"junk.{ext}"
    junk.write_bytes(b"\x00garbage" * 7)
    with pytest.raises(CheckpointError, match="junk"):
        gg.load(junk)
    empty = tmp_path / f"empty.{ext}"
    empty.write_bytes(b"")
    with pytest.raises(CheckpointError, match="empty"):
        gg.load(empty)


@FORMATS
def test_interrupted_save_leaves_previous_file(tmp_path, ext, monkeypatch):
    path = tmp_path / f"c.{ext}"
    gg.save({"w": gg.tensor([1.0, 2.0])}, path)
    before = path.read_bytes()
    from ggmlgrad.io import checkpoint

    def boom(tmp, leaves, meta):
        with open(tmp, "wb") as f:
            f.write(b"partial")
        raise KeyboardInterrupt("interrupted")

    monkeypatch.setattr(checkpoint, "_write_safetensors" if ext == "safetensors" else "_write_gguf", boom)
    with pytest.raises(KeyboardInterrupt):
        gg.save({"w": gg.tensor([9.0, 9.0])}, path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == [path.name]        # no temporary file left behind
    assert gg.load(path)["w"].tolist() == [1.0, 2.0]


def test_refusals(tmp_path):
    with pytest.raises(TypeError, match="cannot save a object"):
        gg.save({"w": object()}, tmp_path / "w.safetensors")
    with pytest.raises(TypeError, match=r"save its \.state_dict\(\)"):
        gg.save(gg.optim.SGD([gg.tensor([1.0], requires_grad=True)], lr=0.1), tmp_path / "o.safetensors")
    with pytest.raises(TypeError, match="key"):
        gg.save({(1, 2): gg.tensor([1.0])}, tmp_path / "w.safetensors")
    with pytest.raises(FileNotFoundError):
        gg.load(tmp_path / "missing.gguf")


def test_foreign_safetensors_file(tmp_path):
    from safetensors.numpy import save_file
    save_file({"a": np.arange(6, dtype=np.float32).reshape(2, 3), "b": np.array([1, 2], np.int64),
               "c": np.array([0.5], np.float64)}, str(tmp_path / "f.safetensors"))
    d = gg.load(tmp_path / "f.safetensors")
    assert d["a"].shape == (2, 3) and d["a"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert d["b"].dtype is gg.int32 and d["b"].tolist() == [1, 2]
    assert d["c"].dtype is gg.float32 and d["c"].tolist() == [0.5]


def test_foreign_gguf_file(tmp_path):
    from gguf import GGUFWriter
    p = str(tmp_path / "f.gguf")
    w = GGUFWriter(p, "llama")
    w.add_tensor("tok.weight", np.arange(6, dtype=np.float32).reshape(2, 3))
    w.add_tensor("h", np.arange(4, dtype=np.float16))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    d = gg.load(p)
    assert d["tok.weight"].shape == (2, 3) and d["tok.weight"].tolist() == [[0, 1, 2], [3, 4, 5]]
    assert d["h"].dtype is gg.float16


@FORMATS
def test_safetensors_file_is_readable_by_other_tools(tmp_path, ext):
    path = tmp_path / f"m.{ext}"
    gg.save({"w": gg.tensor(np.arange(6, dtype=np.float32).reshape(2, 3))}, path)
    if ext == "safetensors":
        from safetensors.numpy import load_file
        np.testing.assert_array_equal(load_file(str(path))["w"], np.arange(6).reshape(2, 3))
    else:
        from gguf import GGUFReader
        t = GGUFReader(str(path)).tensors[0]
        assert t.name == "w"
        np.testing.assert_array_equal(np.asarray(t.data), np.arange(6).reshape(2, 3))


@pytest.mark.parametrize("graph", [False, True], ids=["eager", "graph"])
@FORMATS
def test_model_and_optimizer_resume_through_file(tmp_path, ext, graph):
    """gg.nn model + AdamW + clipping + StepLR: save, continue; load into fresh objects, resume: identical."""
    from ggmlgrad.nn.utils import clip_grad_norm_
    rng = np.random.default_rng(5)
    x = rng.standard_normal((32, 3)).astype(np.float32)
    y = rng.standard_normal((32, 2)).astype(np.float32)

    def build(seed):
        gg.manual_seed(seed)
        model = gg.nn.Sequential(gg.nn.Linear(3, 8), gg.nn.Tanh(), gg.nn.Linear(8, 2))
        opt = gg.optim.AdamW(model.parameters(), lr=0.02, weight_decay=0.05)
        return model, opt, gg.optim.lr_scheduler.StepLR(opt, step_size=3, gamma=0.5)

    def train(model, opt, sched, n):
        for _ in range(n):
            opt.zero_grad()
            gg.nn.functional.mse_loss(model(gg.tensor(x)), gg.tensor(y)).backward()
            clip_grad_norm_(model.parameters(), 0.5)
            opt.step()
            sched.step()

    with gg.graph_mode(graph):
        model, opt, sched = build(0)
        train(model, opt, sched, 4)
        path = tmp_path / f"run.{ext}"
        gg.save({"model": model.state_dict(), "optim": opt.state_dict(), "sched": sched.state_dict()}, path)
        train(model, opt, sched, 5)
        expected = {k: v.numpy() for k, v in model.state_dict().items()}

        model2, opt2, sched2 = build(1)                  # different init: everything must come from the file
        ck = gg.load(path)
        model2.load_state_dict(ck["model"])
        opt2.load_state_dict(ck["optim"])
        sched2.load_state_dict(ck["sched"])
        train(model2, opt2, sched2, 5)
        got = {k: v.numpy() for k, v in model2.state_dict().items()}
    assert list(got) == list(expected)
    for k in expected:
        np.testing.assert_array_equal(got[k], expected[k], err_msg=k)
    assert opt2.state[next(iter(model2.parameters()))]["step"] == 9


_KILLED_SAVE = """
import os, signal, sys
import ggmlgrad as gg
from ggmlgrad.io import checkpoint
real = checkpoint._write_{fmt}
def dies_mid_write(tmp, leaves, meta):
    real(tmp, leaves, meta)                  # the temporary file is complete on disk ...
    os.kill(os.getpid(), signal.SIGKILL)     # ... when the process is killed before the rename
checkpoint._write_{fmt} = dies_mid_write
gg.save({{"w": gg.ones(1000)}}, sys.argv[1])
"""


@FORMATS
def test_killed_save_leaves_previous_file_and_next_save_clears_its_temporary(tmp_path, ext):
    import signal
    import subprocess
    import sys
    path = tmp_path / f"c.{ext}"
    gg.save({"w": gg.tensor([1.0, 2.0])}, path)
    r = subprocess.run([sys.executable, "-c", _KILLED_SAVE.format(fmt=ext), str(path)], capture_output=True)
    assert r.returncode == -signal.SIGKILL, r.stderr.decode()[-2000:]
    stale = [n for n in os.listdir(tmp_path) if n != path.name]
    assert len(stale) == 1 and stale[0].startswith(f".{path.name}.") and stale[0].endswith(".tmp")
    assert gg.load(path)["w"].tolist() == [1.0, 2.0]          # the killed save did not touch it
    unrelated = [tmp_path / ".other.safetensors.999999.x.tmp",       # other targets' temporaries: not ours
                 tmp_path / f".{path.name}.999999.{ext}.999999.x.tmp"]   # (of a file named c.<ext>.999999.<ext>)
    for u in unrelated:
        u.write_bytes(b"x")
    gg.save({"w": gg.tensor([3.0])}, path)
    assert sorted(os.listdir(tmp_path)) == sorted([path.name] + [u.name for u in unrelated])
    assert gg.load(path)["w"].tolist() == [3.0]


def test_temporary_of_a_running_save_is_kept(tmp_path):
    import subprocess
    import sys
    path = tmp_path / "c.safetensors"
    live = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        busy = tmp_path / f".{path.name}.{live.pid}.abc123.tmp"   # a save in progress elsewhere
        busy.write_bytes(b"partial")
        gg.save({"w": gg.tensor([1.0])}, path)
        assert busy.exists()
    finally:
        live.kill()
        live.wait()
    gg.save({"w": gg.tensor([1.0])}, path)                      # its process is gone now
    assert not busy.exists()


@FORMATS
def test_failed_fsync_leaves_previous_file(tmp_path, ext, monkeypatch):
    path = tmp_path / f"c.{ext}"
    gg.save({"w": gg.tensor([1.0, 2.0])}, path)

    def disk_full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(OSError, match="No space"):
        gg.save({"w": gg.ones(500)}, path)
    monkeypatch.undo()
    assert os.listdir(tmp_path) == [path.name]
    assert gg.load(path)["w"].tolist() == [1.0, 2.0]


@FORMATS
def test_more_than_4_dims_refused_at_load_naming_file_and_tensor(tmp_path, ext):
    """Files of other tools with 5-D/6-D tensors; ggmlgrad's own files keep 5-D NumPy arrays."""
    a5 = np.arange(12, dtype=np.float32).reshape(1, 2, 1, 2, 3)
    p = tmp_path / f"five.{ext}"
    if ext == "safetensors":
        from safetensors.numpy import save_file
        save_file({"ok": a5.reshape(4, 3), "t5": a5, "t6": a5.reshape(1, 1, 2, 1, 2, 3)}, str(p))
    else:
        from gguf import GGUFWriter
        w = GGUFWriter(str(p), "llama")
        w.add_tensor("ok", a5.reshape(4, 3))
        w.add_tensor("t5", a5)
        w.write_header_to_file()
        w.write_kv_data_to_file()
        w.write_tensors_to_file()
        w.close()
    with pytest.raises(CheckpointError, match=rf"five\.{ext}.*'t5'.*5 dimensions.*at most 4"):
        gg.load(p)
    own = tmp_path / f"own.{ext}"
    gg.save({"arr": a5, "t": gg.tensor(a5.reshape(2, 6))}, own)
    back = gg.load(own)
    np.testing.assert_array_equal(back["arr"], a5)
    assert back["t"].shape == (2, 6)


def test_gguf_truncated_by_its_last_data_byte_raises(tmp_path):
    from gguf import GGUFWriter
    p = tmp_path / "f.gguf"
    w = GGUFWriter(str(p), "llama")
    w.add_tensor("a", np.arange(8, dtype=np.float32))        # 32 bytes: the data ends the file, no padding
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    data = p.read_bytes()
    assert gg.load(p)["a"].tolist() == list(range(8))
    (tmp_path / "t.gguf").write_bytes(data[:-1])
    with pytest.raises(CheckpointError, match=r"t\.gguf.*'a'.*past the end"):
        gg.load(tmp_path / "t.gguf")


@FORMATS
def test_load_holds_one_tensor_at_a_time_in_host_memory(tmp_path, ext):
    """Each tensor is read, checked and uploaded before the next: host heap use peaks near the
    largest tensor, not the file (a read() of the whole file, or all tensors first, would show)."""
    import tracemalloc
    w = {f"w{i}": gg.tensor(np.full((256, 256), i, np.float32)) for i in range(8)}   # 8 x 256 KiB
    path = tmp_path / f"big.{ext}"
    gg.save(w, path)
    tracemalloc.start()
    try:
        back = gg.load(path)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2.5 * 256 * 256 * 4, peak
    for k, v in w.items():
        np.testing.assert_array_equal(back[k].numpy(), v.numpy())


@FORMATS
def test_file_truncated_while_loading_raises(tmp_path, ext, monkeypatch):
    """Another program cutting the file between the header check and the data reads: a clear
    error (reads, not a memory map, which would crash the process with SIGBUS)."""
    from ggmlgrad.io import errors
    path = tmp_path / f"cut.{ext}"
    gg.save({"a": gg.ones(1000), "b": gg.ones(1000)}, path)
    real = errors.FileBytes.values

    def cut_then_read(self, e, np_dtype):
        os.truncate(path, e.begin + 10)
        return real(self, e, np_dtype)

    monkeypatch.setattr(errors.FileBytes, "values", cut_then_read)
    with pytest.raises(CheckpointError, match=r"cut\.(safetensors|gguf).*changed while tensor"):
        gg.load(path)
