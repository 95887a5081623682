"""MultiheadAttention (PyTorch's parameter names, so state dicts carry over)."""
from __future__ import annotations

import math

import numpy as np

from ..ops import op
from ..tensor import Tensor
from ..tensor.creation import zeros
from . import functional as F
from . import init
from .layers import Linear, _float32_only
from .module import Module, Parameter
from .utils.rnn import filled
from ..tensor.functional_shape import cat


def _pad_columns(mask: Tensor, k: int) -> Tensor:
    """``mask`` with ``k`` zero columns appended (keys that are always attended)."""
    if k == 0:
        return mask
    return cat([mask, filled(mask, tuple(mask.shape[:-1]) + (k,), 0.0)], mask.ndim - 1)


class MultiheadAttention(Module):
    """Multi-head attention: ``softmax(Q K^T / sqrt(d) + masks) V`` over ``num_heads`` heads, then ``out_proj``.

    ``batch_first=False`` (PyTorch's default) takes (L, B, E); ``batch_first=True`` takes (B, L, E);
    2-D inputs are unbatched. ``key_padding_mask`` (B, S): True (or nonzero int32) marks padding to
    ignore, a float tensor is added. ``attn_mask`` (L, S) or (B*num_heads, L, S): True marks a
    position that may NOT be attended (PyTorch's MHA convention), a float tensor is added.
    ``is_causal=True`` masks keys after the query position (here it is applied even without
    ``attn_mask``, where PyTorch requires both). With ``need_weights=False`` and no dropout the
    forward is ggml's flash attention; returning weights (PyTorch's default) materialises them.

    >>> import ggmlgrad as gg
    >>> mha = gg.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> out, w = mha(gg.ones(3, 5, 8), gg.ones(3, 4, 8), gg.ones(3, 4, 8))
    >>> out.shape, w.shape
    ((3, 5, 8), (3, 5, 4))
    """

    def __init__(self, embed_dim: int, num_heads: int, dropout: float = 0.0, bias: bool = True,
                 add_bias_kv: bool = False, add_zero_attn: bool = False, kdim: int | None = None,
                 vdim: int | None = None, batch_first: bool = False, device=None, dtype=None) -> None:
        super().__init__()
        _float32_only("MultiheadAttention", dtype)
        if isinstance(embed_dim, bool) or not isinstance(embed_dim, int) or embed_dim <= 0:
            raise ValueError(f"MultiheadAttention: embed_dim must be a positive int, got {embed_dim!r}")
        if isinstance(num_heads, bool) or not isinstance(num_heads, int) or num_heads <= 0 or embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by num_heads ({num_heads})")
        self.embed_dim = embed_dim
        self.kdim = kdim if kdim is not None else embed_dim
        self.vdim = vdim if vdim is not None else embed_dim
        self._qkv_same_embed_dim = self.kdim == embed_dim and self.vdim == embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.dropout = float(dropout)
        self.batch_first = batch_first
        e = embed_dim
        if self._qkv_same_embed_dim:
            self.in_proj_weight = Parameter(zeros(3 * e, e, device=device))
            self.register_parameter("q_proj_weight", None)
            self.register_parameter("k_proj_weight", None)
            self.register_parameter("v_proj_weight", None)
        else:
            self.q_proj_weight = Parameter(zeros(e, e, device=device))
            self.k_proj_weight = Parameter(zeros(e, self.kdim, device=device))
            self.v_proj_weight = Parameter(zeros(e, self.vdim, device=device))
            self.register_parameter("in_proj_weight", None)
        if bias:
            self.in_proj_bias = Parameter(zeros(3 * e, device=device))
        else:
            self.register_parameter("in_proj_bias", None)
        self.out_proj = Linear(e, e, bias=bias, device=device)
        if add_bias_kv:  # a learned key and value appended to every sequence (torch's bias_k / bias_v)
            self.bias_k = Parameter(zeros(1, 1, e, device=device))
            self.bias_v = Parameter(zeros(1, 1, e, device=device))
        else:
            self.bias_k = self.bias_v = None
        self.add_zero_attn = bool(add_zero_attn)
        self._reset_parameters()

    def _reset_parameters(self) -> None:
        if self._qkv_same_embed_dim:
            init.xavier_uniform_(self.in_proj_weight)
        else:
            init.xavier_uniform_(self.q_proj_weight)
            init.xavier_uniform_(self.k_proj_weight)
            init.xavier_uniform_(self.v_proj_weight)
        if self.in_proj_bias is not None:
            init.zeros_(self.in_proj_bias)
            init.zeros_(self.out_proj.bias)
        if self.bias_k is not None:
            init.xavier_normal_(self.bias_k)
            init.xavier_normal_(self.bias_v)

    def extra_repr(self) -> str:
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, batch_first={self.batch_first}"

    # ------------------------------------------------------------------ pieces
    def _rows(self, t: Tensor, i: int) -> Tensor:
        """Rows [i*E, (i+1)*E) of a packed (3E, ...) parameter."""
        e = self.embed_dim
        start = (i * e,) + (0,) * (t.ndim - 1)
        stop = ((i + 1) * e,) + tuple(t.shape[1:])
        return op.slice(t, start=start, stop=stop, step=(1,) * t.ndim)

    def _proj(self, x: Tensor, i: int) -> Tensor:
        if self._qkv_same_embed_dim:
            w = self._rows(self.in_proj_weight, i)
        else:
            w = (self.q_proj_weight, self.k_proj_weight, self.v_proj_weight)[i]
        b = self._rows(self.in_proj_bias, i) if self.in_proj_bias is not None else None
        return F.linear(x, w, b)

    def _heads(self, x: Tensor) -> Tensor:
        """(B, L, E) → (B, H, L, D)."""
        b, n, _ = x.shape
        return x.reshape(b, n, self.num_heads, self.head_dim).permute(0, 2, 1, 3)

    def _mask(self, key_padding_mask, attn_mask, b: int, lq: int, s: int, device, extra: int = 0):
        """The additive mask (b or 1, heads or 1, lq, s + extra): ``extra`` zero columns for the keys
        that add_bias_kv / add_zero_attn append (always attended, as torch pads its masks)."""
        mask = None
        if key_padding_mask is not None:
            kp = F._as_additive(key_padding_mask, true_means_masked=True, device=device)
            if tuple(kp.shape) != (b, s):
                raise ValueError(f"MultiheadAttention: key_padding_mask must have shape ({b}, {s}), got {kp.shape}")
            mask = _pad_columns(kp, extra).reshape(b, 1, 1, s + extra)
        if attn_mask is not None:
            am = F._as_additive(attn_mask, true_means_masked=True, device=device)
            if tuple(am.shape) == (lq, s):
                am = _pad_columns(am, extra)
            elif tuple(am.shape) == (b * self.num_heads, lq, s):
                am = _pad_columns(am, extra).reshape(b, self.num_heads, lq, s + extra)
            else:
                raise ValueError(f"MultiheadAttention: attn_mask must have shape ({lq}, {s}) or "
                                 f"({b * self.num_heads}, {lq}, {s}), got {am.shape}")
            mask = am if mask is None else mask + am
        return mask

    def _extra_keys(self, k: Tensor, v: Tensor, b: int) -> tuple:
        """add_bias_kv: bias_k / bias_v appended to the projected keys and values (B, S, E)."""
        if self.bias_k is None:
            return k, v
        e = self.embed_dim
        bk = op.broadcast_to(self.bias_k, shape=(b, 1, e))
        bv = op.broadcast_to(self.bias_v, shape=(b, 1, e))
        return cat([k, bk], 1), cat([v, bv], 1)

    # ------------------------------------------------------------------ forward
    def forward(self, query: Tensor, key: Tensor, value: Tensor, key_padding_mask=None, need_weights: bool = True,
                attn_mask=None, average_attn_weights: bool = True, is_causal: bool = False):
        unbatched = query.ndim == 2
        if unbatched:
            query, key, value = (t.reshape((1,) + tuple(t.shape)) for t in (query, key, value))
            if key_padding_mask is not None:
                key_padding_mask = (key_padding_mask.reshape(1, -1) if isinstance(key_padding_mask, Tensor)
                                    else np.asarray(key_padding_mask).reshape(1, -1))
        elif not self.batch_first:
            query, key, value = (t.permute(1, 0, 2) for t in (query, key, value))
        if query.ndim != 3 or key.ndim != 3 or value.ndim != 3:
            raise ValueError(f"MultiheadAttention: expected 3-D (or unbatched 2-D) inputs, got "
                             f"{query.shape}, {key.shape}, {value.shape}")
        b, lq, e = query.shape
        s = key.shape[1]
        if e != self.embed_dim or key.shape[2] != self.kdim or value.shape[2] != self.vdim:
            raise ValueError(f"MultiheadAttention: feature sizes ({e}, {key.shape[2]}, {value.shape[2]}) do not match "
                             f"embed_dim/kdim/vdim ({self.embed_dim}, {self.kdim}, {self.vdim})")
        if key.shape[:2] != value.shape[:2] or key.shape[0] != b:
            raise ValueError(f"MultiheadAttention: key {key.shape} and value {value.shape} must share batch and "
                             f"length with batch {b}")
        q = self._heads(self._proj(query, 0))
        k, v = self._extra_keys(self._proj(key, 1), self._proj(value, 2), b)
        k, v = self._heads(k), self._heads(v)
        if self.add_zero_attn:   # a zero key and value per head (after the heads split, as torch)
            zero = filled(k, (b, self.num_heads, 1, self.head_dim), 0.0)
            k, v = cat([k, zero], 2), cat([v, zero], 2)
        extra = int(self.bias_k is not None) + int(self.add_zero_attn)
        if is_causal and extra:  # causal over the appended keys too would differ from torch's padded mask
            if attn_mask is None:
                raise ValueError("MultiheadAttention: with add_bias_kv or add_zero_attn, is_causal needs the causal "
                                 "attn_mask itself (as torch: is_causal is a hint about attn_mask)")
            is_causal = False
        mask = self._mask(key_padding_mask, attn_mask, b, lq, s, query.device, extra)
        extra = (mask,) if mask is not None else ()
        scale = 1.0 / math.sqrt(self.head_dim)
        drop = self.dropout if self.training else 0.0
        weights = None
        if need_weights or drop > 0.0:
            w = op.softmax(op.matmul(q, op.transpose_last(k)), *extra, scale=scale, causal=is_causal)
            out = op.matmul(F.dropout(w, drop, True) if drop > 0.0 else w, v)
            if need_weights:
                weights = w.mean(axis=1) if average_attn_weights else w
        else:
            exact = F._is_binary_mask(key_padding_mask) and F._is_binary_mask(attn_mask)
            out = op.attention(q, k, v, *extra, scale=scale, causal=is_causal, flash=exact)
        out = out.permute(0, 2, 1, 3).reshape(b, lq, e)
        out = self.out_proj(out)
        if unbatched:
            out = out.reshape(lq, e)
            if weights is not None:
                weights = weights.reshape(tuple(weights.shape[1:]))
        elif not self.batch_first:
            out = out.permute(1, 0, 2)
        return out, weights
