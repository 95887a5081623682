"""Layer 6: capture — record a function or a training step once per signature, replay it.

``gg.capture(fn)``, ``gg.capture_step(loss_fn, optimizer, max_grad_norm=None)`` and the
device-resident table ``gg.Buffer`` (replay/rollout buffers gathered inside captured steps).
"""
from .api import Captured, CapturedStep, capture, capture_step
from .buffer import Buffer

__all__ = ["capture", "capture_step", "Captured", "CapturedStep", "Buffer"]
