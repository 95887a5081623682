"""Shared by the kernel tests: build kernels/ggmlgrad_kernels.c into a library here, and ggml
tensor headers over NumPy arrays for calling its entry points directly."""
from __future__ import annotations

import ctypes
import subprocess
from pathlib import Path

import numpy as np
import pytest

import ggmlgrad as gg
from ggmlgrad import fastbuild
from ggmlgrad._ggml import TensorStruct

KERNEL_SOURCE = Path(gg.__file__).with_name("kernels") / "ggmlgrad_kernels.c"


def build_kernels(out_dir: Path, *extra_flags: str) -> ctypes.CDLL:
    """The kernels compiled with the fast build's flags (plus ``extra_flags``, e.g. -DGK_NO_CLONES)
    into ``out_dir``; skips the calling test where no C compiler is found."""
    cc = fastbuild.find_compilers()
    if cc is None:
        pytest.skip("no C compiler to build the kernels with")
    import libggml
    header = Path(next(iter(libggml.__path__))) / "include"
    _, flags = fastbuild.cpu_flags()
    out = Path(out_dir) / f"libgk{'_'.join(f.strip('-') for f in extra_flags)}.so"
    subprocess.run([cc[0], *fastbuild.KERNEL_CFLAGS, *flags, *extra_flags, f"-I{header}", str(KERNEL_SOURCE),
                    "-o", str(out), "-lm"], check=True)
    return ctypes.CDLL(str(out))


def matrix_header(a: np.ndarray) -> TensorStruct:
    """A ggml header over a 1-D or 2-D array of any strides (ggml order: ne0 = the last axis)."""
    a2 = a.reshape(1, -1) if a.ndim == 1 else a
    t = TensorStruct()
    t.ne[0], t.ne[1], t.ne[2], t.ne[3] = a2.shape[1], a2.shape[0], 1, 1
    t.nb[0], t.nb[1] = a2.strides[1], a2.strides[0]
    t.nb[2] = t.nb[3] = a2.strides[0] * a2.shape[0]
    t.data = a.ctypes.data
    return t


def check_linear_in_mode(mode: str, x: np.ndarray, w: np.ndarray, b: np.ndarray, g: np.ndarray):
    """``linear(x, w, b)`` and the gradients of x, w and b (loss sum(y * g)) in ``mode`` (eager, graph,
    check or capture) against float64; returns the captured function in capture mode (else None),
    for a look at its graph."""
    def run(xa, wa, ba, ga):
        xt, wt, bt = (gg.as_tensor(a).requires_grad_() for a in (xa, wa, ba))
        y = gg.linear(xt, wt, bt)
        (y * gg.as_tensor(ga)).sum().backward()
        return y.detach(), xt.grad, wt.grad, bt.grad
    captured = None
    if mode == "capture":
        captured = gg.capture(run)
        outs = captured(x, w, b, g)
    else:
        with gg.graph_mode(mode != "eager", check=mode == "check"):
            outs = [t.numpy() for t in run(x, w, b, g)]
    x64, w64, g64 = x.astype(np.float64), w.astype(np.float64), g.astype(np.float64)
    x2, g2 = x64.reshape(-1, x.shape[-1]), g64.reshape(-1, w.shape[0])
    refs = [x64 @ w64.T + b, g64 @ w64, g2.T @ x2, g2.sum(axis=0)]
    for name, got, ref in zip(["y", "x.grad", "w.grad", "b.grad"], outs, refs):
        np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-5, err_msg=name)
    return captured
