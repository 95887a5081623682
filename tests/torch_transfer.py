"""Test helper: the same weights in torch and ggmlgrad (torch state_dict → .safetensors → load_state_dict)."""
from __future__ import annotations

import numpy as np
import torch
from safetensors.torch import save_file

import ggmlgrad as gg


def transfer(torch_module: "torch.nn.Module", gg_module, tmp_path, name: str = "w") -> None:
    """Write ``torch_module``'s state dict as a .safetensors file and load it into ``gg_module``
    (strict: every name must match, so torch's parameter names are checked too)."""
    path = tmp_path / f"{name}.safetensors"
    sd = {k: v.detach().float().contiguous() for k, v in torch_module.state_dict().items()}
    save_file(sd, str(path))
    gg_module.load_state_dict(gg.load(str(path)))


def grads_close(torch_module, gg_module, rtol: float = 1e-4, atol: float = 1e-5) -> None:
    """Every parameter gradient of ``gg_module`` equals torch's (same names)."""
    tp = dict(torch_module.named_parameters())
    gp = dict(gg_module.named_parameters())
    assert sorted(tp) == sorted(gp)
    for k, p in tp.items():
        assert p.grad is not None, k
        assert gp[k].grad is not None, k
        np.testing.assert_allclose(gp[k].grad.numpy(), p.grad.double().numpy(), rtol=rtol, atol=atol, err_msg=k)
