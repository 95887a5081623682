"""``ggmlgrad.utils.tensorboard.SummaryWriter``: torch's TensorBoard logger, written with the
``tensorboard`` package's event-file writer and protocol buffers (``pip install "ggmlgrad[tensorboard]"``).

torch's API for what training scripts log: ``add_scalar``, ``add_scalars``, ``add_histogram``,
``add_text``, ``flush``, ``close`` (and ``with SummaryWriter(...) as w:``). Values may be Python
numbers, NumPy arrays or ggmlgrad tensors. The files are TensorBoard's own event files.

>>> import tempfile
>>> from ggmlgrad.utils.tensorboard import SummaryWriter
>>> with SummaryWriter(tempfile.mkdtemp()) as w:
...     w.add_scalar("loss", 0.5, global_step=1)
"""
from __future__ import annotations

import os
import socket
import time
from datetime import datetime

import numpy as np

__all__ = ["SummaryWriter"]


def _tb():
    try:
        from tensorboard.compat.proto import event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2
        from tensorboard.summary.writer.event_file_writer import EventFileWriter
    except ImportError:
        raise ImportError("ggmlgrad.utils.tensorboard needs the tensorboard package: "
                          "pip install 'ggmlgrad[tensorboard]' (or pip install tensorboard)") from None
    return event_pb2, summary_pb2, tensor_pb2, tensor_shape_pb2, EventFileWriter


def _host(values) -> np.ndarray:
    """A NumPy copy of a number, array or tensor (a tensor that requires grad is read detached)."""
    if hasattr(values, "detach") and hasattr(values, "numpy"):
        values = values.detach().numpy()
    return np.asarray(values, dtype=np.float64)


def _scalar(value) -> float:
    a = _host(value)
    if a.size != 1:
        raise ValueError(f"add_scalar: expected one value, got shape {a.shape}")
    return float(a.reshape(()))


class SummaryWriter:
    """Writes TensorBoard event files to ``log_dir`` (default ``runs/<date>_<host><comment>``, as torch)."""

    def __init__(self, log_dir: str | None = None, comment: str = "", purge_step=None, max_queue: int = 10,
                 flush_secs: int = 120, filename_suffix: str = ""):
        event_pb2, self._summary_pb2, self._tensor_pb2, self._shape_pb2, writer_cls = _tb()
        self._event_pb2, self._writer_cls = event_pb2, writer_cls
        if log_dir is None:
            stamp = datetime.now().strftime("%b%d_%H-%M-%S")
            log_dir = os.path.join("runs", f"{stamp}_{socket.gethostname()}{comment}")
        self.log_dir = str(log_dir)
        self._opts = {"max_queue_size": max_queue, "flush_secs": flush_secs, "filename_suffix": filename_suffix}
        self._writer = writer_cls(self.log_dir, **self._opts)
        self._children: dict[str, object] = {}      # add_scalars' per-tag writers, as torch's

    def get_logdir(self) -> str:
        return self.log_dir

    def _event(self, summary, global_step, walltime, writer=None) -> None:
        e = self._event_pb2.Event(summary=summary, wall_time=time.time() if walltime is None else float(walltime))
        if global_step is not None:
            e.step = int(global_step)
        (writer or self._writer).add_event(e)

    def add_scalar(self, tag: str, scalar_value, global_step: int | None = None, walltime: float | None = None,
                   new_style: bool = False, double_precision: bool = False) -> None:
        """One value of the series ``tag`` at ``global_step``."""
        s = self._summary_pb2.Summary(value=[self._summary_pb2.Summary.Value(tag=tag,
                                                                             simple_value=_scalar(scalar_value))])
        self._event(s, global_step, walltime)

    def add_scalars(self, main_tag: str, tag_scalar_dict: dict, global_step: int | None = None,
                    walltime: float | None = None) -> None:
        """Several series in one chart: each in its own folder ``<log_dir>/<main_tag>_<tag>``, as torch."""
        for tag, value in tag_scalar_dict.items():
            folder = os.path.join(self.log_dir, f"{main_tag.replace('/', '_')}_{tag}")
            w = self._children.get(folder)
            if w is None:
                w = self._children[folder] = self._writer_cls(folder, **self._opts)
            s = self._summary_pb2.Summary(value=[self._summary_pb2.Summary.Value(tag=main_tag,
                                                                                 simple_value=_scalar(value))])
            self._event(s, global_step, walltime, w)

    def add_histogram(self, tag: str, values, global_step: int | None = None, bins="tensorflow",
                      walltime: float | None = None, max_bins=None) -> None:
        """A histogram of ``values``; ``bins`` as NumPy's ``histogram`` takes it (torch's default
        ``"tensorflow"`` is NumPy's ``"auto"`` here)."""
        a = _host(values).reshape(-1)
        if a.size == 0:
            raise ValueError("add_histogram: the input has no elements")
        counts, edges = np.histogram(a, bins="auto" if bins == "tensorflow" else bins)
        h = self._summary_pb2.HistogramProto(min=float(a.min()), max=float(a.max()), num=int(a.size),
                                             sum=float(a.sum()), sum_squares=float((a * a).sum()),
                                             bucket_limit=[float(x) for x in edges[1:]],
                                             bucket=[float(c) for c in counts])
        self._event(self._summary_pb2.Summary(value=[self._summary_pb2.Summary.Value(tag=tag, histo=h)]),
                    global_step, walltime)

    def add_text(self, tag: str, text_string: str, global_step: int | None = None,
                 walltime: float | None = None) -> None:
        """A text entry, shown in TensorBoard's text tab (tag ``<tag>/text_summary``, as torch)."""
        meta = self._summary_pb2.SummaryMetadata(
            plugin_data=self._summary_pb2.SummaryMetadata.PluginData(plugin_name="text"))
        shape = self._shape_pb2.TensorShapeProto(dim=[self._shape_pb2.TensorShapeProto.Dim(size=1)])
        t = self._tensor_pb2.TensorProto(dtype="DT_STRING", string_val=[str(text_string).encode("utf-8")],
                                         tensor_shape=shape)
        value = self._summary_pb2.Summary.Value(tag=tag + "/text_summary", metadata=meta, tensor=t)
        self._event(self._summary_pb2.Summary(value=[value]), global_step, walltime)

    def flush(self) -> None:
        """Write everything pending to disk."""
        self._writer.flush()
        for w in self._children.values():
            w.flush()

    def close(self) -> None:
        self._writer.close()
        for w in self._children.values():
            w.close()

    def __enter__(self) -> "SummaryWriter":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
