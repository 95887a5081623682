"""Layer 6: capture — record a function or a training step once per signature, replay it.

``gg.capture(fn)``, ``gg.capture_step(loss_fn, optimizer, max_grad_norm=None)`` and the
device-resident table ``gg.Buffer`` (replay/rollout buffers gathered inside captured steps).

How a replay runs (SPEC §4): the call's signature (argument structure, shapes, dtypes,
device, matmul precision; for steps also clipping on/off) selects a cached recording
(LRU, ``max_recordings=8``); the arguments, noise draws, clip limit and the optimizer's
hyperparameters are packed into one host block and the span that changed since the last
call is sent in ONE upload; each recorded graph computes on its own ``ggml_backend_sched``
(allocated once at record time); ONE download brings back every output, copied into fresh
NumPy arrays. A forward replay is 1 compute; a training step is 2 (forward+backward+clip,
then the in-place update). With ``GGMLGRAD_CAPTURE_EXPLAIN=1`` (or ``explain=True``) every
new recording after the first logs why (``logging`` logger ``ggmlgrad.capture``).

Recording runs the function in graph mode with a guard on the engine: an upload other
than the inputs, a read-back or an eager compute raises ``gg.CaptureError`` naming the
line. Computed tensors the graphs read (parameters, optimizer state, buffers) are
remembered by identity and memory: replacing one records again, in-place updates do not.
The module state the function read is followed too (``state.py``): the training flags
it read end the signature (``eval()``/``train()`` switch between cached recordings),
and a parameter, buffer or submodule replaced in a module it touched records again;
a replay compares one counter and looks closer only after a module changed.
Multi-threaded computes are autotuned per recording on the first replays (the policy's
thread count against one thread; ``gg.set_num_threads`` overrides). Threads: the guard and
the active recorder are per thread, so several threads may record and replay their own captured
functions at once; calls of one captured function from several threads take turns.
"""
from .api import Captured, CapturedStep, capture, capture_step
from .buffer import Buffer

__all__ = ["capture", "capture_step", "Captured", "CapturedStep", "Buffer"]
