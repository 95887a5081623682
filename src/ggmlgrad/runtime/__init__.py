"""Layer 2: runtime — devices, graph execution through ggml_backend_sched, threads, device memory."""
from .device import Device, DeviceError, device, devices, get_device, set_device, resolve_device, cpu_device
from .memory import HostStorage, SliceAlias, Storage, StridedAlias, allocate, device_address, pool_stats
from .executor import Executor, executor_for
from .threads import set_num_threads, get_num_threads, choose_threads

__all__ = ["Device", "DeviceError", "device", "devices", "get_device", "set_device", "resolve_device", "cpu_device", "Storage", "HostStorage", "SliceAlias", "StridedAlias",
           "allocate", "device_address", "pool_stats", "Executor", "executor_for", "set_num_threads", "get_num_threads",
           "choose_threads"]
