"""Loaded only by tools/gpu_check.sh (through PYTHONPATH), on a GPU machine whose preinstalled torch is older
than the 2.13 the course pins. commlib uses torch 2.13's names for two collectives; older releases call them
all_gather_into_tensor and reduce_scatter_tensor, with the same arguments (output, input)."""

try:
    import torch.distributed as _dist
except ImportError:  # a Python without torch (pip, for example): nothing to do
    _dist = None

if _dist is not None and _dist.is_available():
    if not hasattr(_dist, "all_gather_single"):
        _dist.all_gather_single = _dist.all_gather_into_tensor
    if not hasattr(_dist, "reduce_scatter_single"):
        _dist.reduce_scatter_single = _dist.reduce_scatter_tensor
