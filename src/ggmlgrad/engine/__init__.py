"""Layer 3: the engine — execution queue, drains, modes, errors, counters, transfers."""
from .array import COMPUTED, FAILED, PENDING, Array, bind, cache_leaf, fail, forget_leaf, ggml_ne, share_value
from .counters import COUNTERS, counters, graph_node_counts, reset_counters
from .dtypes import DType, bfloat16, float16, float32, int32
from . import dtypes
from .errors import CaptureError, GraphError, GraphMemoryError, PendingError
from .modes import ModeSetting, check_enabled, graph_enabled, graph_mode, local_mode, matmul_precision, precision
from .queue import ENGINE, Engine, is_pending, queue_length, user_site
from .records import phase, reset_phase, set_phase
from .observer import Observer, active_observer
from . import context
from .transfer import count_download, download, host_array, host_value, new_from_host, upload_into
