"""Transformer blocks (torch.nn's): encoder and decoder layers and stacks, and ``Transformer``.

Built on :class:`~ggmlgrad.nn.MultiheadAttention` (flash attention for self-attention without
returned weights), ``Linear``, ``LayerNorm`` and ``Dropout``, with torch's submodule names
(``self_attn``, ``multihead_attn``, ``linear1``, ``linear2``, ``norm1``..``norm3``,
``layers.{i}``, ``encoder.norm``...), so a torch state dict loads as is.

Masks as in torch: ``*_mask`` (L, S) or (N*nhead, L, S), a bool mask's True marks a position
that may not be attended, a float mask is added; ``*_key_padding_mask`` (N, S), True marks
padding. ``is_causal=True`` masks keys after each query (ggmlgrad applies it even without a
mask, where torch treats it as a hint about ``mask``).

>>> import ggmlgrad as gg
>>> layer = gg.nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, batch_first=True)
>>> enc = gg.nn.TransformerEncoder(layer, num_layers=2)
>>> enc(gg.ones(2, 5, 16), is_causal=True).shape
(2, 5, 16)
"""
from __future__ import annotations

import copy
from typing import Callable

import numpy as np

from ..tensor import Tensor, tensor
from . import functional as F
from . import init
from .attention import MultiheadAttention
from .container import ModuleList
from .layers import Dropout, LayerNorm, Linear, _float32_only
from .module import Module

__all__ = ["TransformerEncoderLayer", "TransformerEncoder", "TransformerDecoderLayer", "TransformerDecoder",
           "Transformer"]


def _activation(name: str, activation):
    if isinstance(activation, str):
        if activation == "relu":
            return F.relu
        if activation == "gelu":
            return F.gelu
        raise RuntimeError(f"{name}: activation should be relu/gelu, not {activation}")
    if not callable(activation):
        raise TypeError(f"{name}: activation must be 'relu', 'gelu' or a callable, got {type(activation).__name__}")
    return activation


class _FeedForward:
    """linear2(dropout(activation(linear1(x)))) → dropout_k: shared by both layer kinds."""

    def _ff_block(self, x: Tensor, out_dropout) -> Tensor:
        return out_dropout(self.linear2(self.dropout(self.activation(self.linear1(x)))))

    def _init_ff(self, d_model: int, dim_feedforward: int, dropout: float, activation, bias: bool, device) -> None:
        self.linear1 = Linear(d_model, dim_feedforward, bias=bias, device=device)
        self.dropout = Dropout(dropout)
        self.linear2 = Linear(dim_feedforward, d_model, bias=bias, device=device)
        act = _activation(type(self).__name__, activation)
        self.activation_relu_or_gelu = 1 if act is F.relu else 2 if act is F.gelu else 0
        self.activation = act


class TransformerEncoderLayer(Module, _FeedForward):
    """Self-attention then a feed-forward block, each with a residual and LayerNorm (after, or
    before with ``norm_first=True``).

    >>> import ggmlgrad as gg
    >>> gg.nn.TransformerEncoderLayer(8, 2, dim_feedforward=16)(gg.ones(5, 3, 8)).shape
    (5, 3, 8)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _float32_only(type(self).__name__, dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            device=device)
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias, device)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)

    def _sa_block(self, x: Tensor, attn_mask, key_padding_mask, is_causal: bool) -> Tensor:
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def forward(self, src: Tensor, src_mask=None, src_key_padding_mask=None, is_causal: bool = False) -> Tensor:
        x = src
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), src_mask, src_key_padding_mask, is_causal)
            x = x + self._ff_block(self.norm2(x), self.dropout2)
        else:
            x = self.norm1(x + self._sa_block(x, src_mask, src_key_padding_mask, is_causal))
            x = self.norm2(x + self._ff_block(x, self.dropout2))
        return x


class TransformerDecoderLayer(Module, _FeedForward):
    """Self-attention, attention over ``memory`` (the encoder output), then a feed-forward block.

    >>> import ggmlgrad as gg
    >>> layer = gg.nn.TransformerDecoderLayer(8, 2, dim_feedforward=16, batch_first=True)
    >>> layer(gg.ones(2, 4, 8), gg.ones(2, 6, 8), tgt_is_causal=True).shape
    (2, 4, 8)
    """

    def __init__(self, d_model: int, nhead: int, dim_feedforward: int = 2048, dropout: float = 0.1,
                 activation: str | Callable = "relu", layer_norm_eps: float = 1e-5, batch_first: bool = False,
                 norm_first: bool = False, bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _float32_only(type(self).__name__, dtype)
        self.self_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                            device=device)
        self.multihead_attn = MultiheadAttention(d_model, nhead, dropout=dropout, bias=bias, batch_first=batch_first,
                                                 device=device)
        self._init_ff(d_model, dim_feedforward, dropout, activation, bias, device)
        self.norm_first = bool(norm_first)
        self.norm1 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device)
        self.norm2 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device)
        self.norm3 = LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device)
        self.dropout1 = Dropout(dropout)
        self.dropout2 = Dropout(dropout)
        self.dropout3 = Dropout(dropout)

    def _sa_block(self, x, attn_mask, key_padding_mask, is_causal):
        x = self.self_attn(x, x, x, attn_mask=attn_mask, key_padding_mask=key_padding_mask, need_weights=False,
                           is_causal=is_causal)[0]
        return self.dropout1(x)

    def _mha_block(self, x, mem, attn_mask, key_padding_mask, is_causal):
        x = self.multihead_attn(x, mem, mem, attn_mask=attn_mask, key_padding_mask=key_padding_mask,
                                need_weights=False, is_causal=is_causal)[0]
        return self.dropout2(x)

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool = False, memory_is_causal: bool = False) -> Tensor:
        x = tgt
        if self.norm_first:
            x = x + self._sa_block(self.norm1(x), tgt_mask, tgt_key_padding_mask, tgt_is_causal)
            x = x + self._mha_block(self.norm2(x), memory, memory_mask, memory_key_padding_mask, memory_is_causal)
            x = x + self._ff_block(self.norm3(x), self.dropout3)
        else:
            x = self.norm1(x + self._sa_block(x, tgt_mask, tgt_key_padding_mask, tgt_is_causal))
            x = self.norm2(x + self._mha_block(x, memory, memory_mask, memory_key_padding_mask, memory_is_causal))
            x = self.norm3(x + self._ff_block(x, self.dropout3))
        return x


def _clones(layer: Module, n: int) -> ModuleList:
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ValueError(f"num_layers must be a non-negative int, got {n!r}")
    return ModuleList([copy.deepcopy(layer) for _ in range(n)])


class TransformerEncoder(Module):
    """``num_layers`` copies of ``encoder_layer`` (deep copies, as torch), then ``norm`` if given.

    >>> import ggmlgrad as gg
    >>> enc = gg.nn.TransformerEncoder(gg.nn.TransformerEncoderLayer(8, 2, 16), 3, norm=gg.nn.LayerNorm(8))
    >>> len(enc.layers), enc(gg.ones(4, 2, 8)).shape
    (3, (4, 2, 8))
    """

    def __init__(self, encoder_layer: Module, num_layers: int, norm: Module | None = None,
                 enable_nested_tensor: bool = True, mask_check: bool = True) -> None:
        super().__init__()
        self.layers = _clones(encoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, src: Tensor, mask=None, src_key_padding_mask=None, is_causal: bool | None = None) -> Tensor:
        out = src
        for layer in self.layers:
            out = layer(out, src_mask=mask, src_key_padding_mask=src_key_padding_mask, is_causal=bool(is_causal))
        return self.norm(out) if self.norm is not None else out


class TransformerDecoder(Module):
    """``num_layers`` copies of ``decoder_layer``, then ``norm`` if given.

    >>> import ggmlgrad as gg
    >>> dec = gg.nn.TransformerDecoder(gg.nn.TransformerDecoderLayer(8, 2, 16), 2)
    >>> dec(gg.ones(3, 2, 8), gg.ones(5, 2, 8)).shape
    (3, 2, 8)
    """

    def __init__(self, decoder_layer: Module, num_layers: int, norm: Module | None = None) -> None:
        super().__init__()
        self.layers = _clones(decoder_layer, num_layers)
        self.num_layers = num_layers
        self.norm = norm

    def forward(self, tgt: Tensor, memory: Tensor, tgt_mask=None, memory_mask=None, tgt_key_padding_mask=None,
                memory_key_padding_mask=None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        out = tgt
        for layer in self.layers:
            out = layer(out, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                        tgt_key_padding_mask=tgt_key_padding_mask, memory_key_padding_mask=memory_key_padding_mask,
                        tgt_is_causal=bool(tgt_is_causal), memory_is_causal=memory_is_causal)
        return self.norm(out) if self.norm is not None else out


class Transformer(Module):
    """The encoder-decoder transformer of "Attention Is All You Need" (torch.nn.Transformer).

    >>> import ggmlgrad as gg
    >>> model = gg.nn.Transformer(d_model=8, nhead=2, num_encoder_layers=1, num_decoder_layers=1,
    ...                           dim_feedforward=16, batch_first=True)
    >>> mask = gg.nn.Transformer.generate_square_subsequent_mask(3)
    >>> model(gg.ones(2, 5, 8), gg.ones(2, 3, 8), tgt_mask=mask).shape
    (2, 3, 8)
    """

    def __init__(self, d_model: int = 512, nhead: int = 8, num_encoder_layers: int = 6, num_decoder_layers: int = 6,
                 dim_feedforward: int = 2048, dropout: float = 0.1, activation: str | Callable = "relu",
                 custom_encoder: Module | None = None, custom_decoder: Module | None = None,
                 layer_norm_eps: float = 1e-5, batch_first: bool = False, norm_first: bool = False,
                 bias: bool = True, device=None, dtype=None) -> None:
        super().__init__()
        _float32_only("Transformer", dtype)
        kw = dict(dim_feedforward=dim_feedforward, dropout=dropout, activation=activation,
                  layer_norm_eps=layer_norm_eps, batch_first=batch_first, norm_first=norm_first, bias=bias,
                  device=device)
        if custom_encoder is not None:
            self.encoder = custom_encoder
        else:
            self.encoder = TransformerEncoder(TransformerEncoderLayer(d_model, nhead, **kw), num_encoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device))
        if custom_decoder is not None:
            self.decoder = custom_decoder
        else:
            self.decoder = TransformerDecoder(TransformerDecoderLayer(d_model, nhead, **kw), num_decoder_layers,
                                              LayerNorm(d_model, eps=layer_norm_eps, bias=bias, device=device))
        for p in self.parameters():   # torch's _reset_parameters: xavier_uniform_ on every matrix
            if p.ndim > 1:
                init.xavier_uniform_(p)
        self.d_model, self.nhead, self.batch_first = d_model, nhead, batch_first

    def forward(self, src: Tensor, tgt: Tensor, src_mask=None, tgt_mask=None, memory_mask=None,
                src_key_padding_mask=None, tgt_key_padding_mask=None, memory_key_padding_mask=None,
                src_is_causal: bool | None = None, tgt_is_causal: bool | None = None,
                memory_is_causal: bool = False) -> Tensor:
        batch_axis = 0 if self.batch_first else 1
        if src.ndim == 3 and tgt.ndim == 3 and src.shape[batch_axis] != tgt.shape[batch_axis]:
            raise RuntimeError("Transformer: the batch number of src and tgt must be equal")
        if src.shape[-1] != self.d_model or tgt.shape[-1] != self.d_model:
            raise RuntimeError("Transformer: the feature number of src and tgt must be equal to d_model")
        memory = self.encoder(src, mask=src_mask, src_key_padding_mask=src_key_padding_mask, is_causal=src_is_causal)
        return self.decoder(tgt, memory, tgt_mask=tgt_mask, memory_mask=memory_mask,
                            tgt_key_padding_mask=tgt_key_padding_mask,
                            memory_key_padding_mask=memory_key_padding_mask, tgt_is_causal=tgt_is_causal,
                            memory_is_causal=memory_is_causal)

    @staticmethod
    def generate_square_subsequent_mask(sz: int, device=None, dtype=None) -> Tensor:
        """The float causal mask (sz, sz): 0 on and below the diagonal, -inf above it."""
        _float32_only("generate_square_subsequent_mask", dtype)
        m = np.triu(np.full((sz, sz), -np.inf, dtype=np.float32), 1)
        return tensor(m, device=device)
