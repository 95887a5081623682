"""``gg.backends.cudnn``: torch's cuDNN switches, accepted and kept as set.

ggml has no cuDNN. ``deterministic`` and ``benchmark`` are plain attributes a program may set and
read: ggmlgrad's kernels do not choose algorithms by timing, and a graph's reductions run in a fixed
order for a fixed thread count, so there is nothing for them to switch.
"""
deterministic: bool = False
benchmark: bool = False
enabled: bool = True
allow_tf32: bool = False


def is_available() -> bool:
    """False: ggml does not use cuDNN."""
    return False
