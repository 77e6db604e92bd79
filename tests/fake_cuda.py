"""A fake CUDA for tests: commlib's CUDA-only branches run on a CPU-only torch (issue 35).

    from tests import fake_cuda            # or COMMLIB_FAKE_CUDA=<gpus>, tests/fake_cuda_site on PYTHONPATH
    with fake_cuda.installed(gpus=4): ...  # torch.cuda says 4 GPUs; "cuda" tensors are CPU tensors underneath

What it stands in for, with host-clock semantics (CPU work is done when the call returns, so "the GPU got
there" is "the host got there"):
- torch.cuda: is_available, device_count, set_device, current_device, is_initialized, get_device_name,
  synchronize, Event (record / synchronize / elapsed_time / query / wait), Stream (wait_stream /
  wait_event / record_event / synchronize / query), current_stream, default_stream, stream(...).
  A name torch.cuda lacks stays missing (torch.cuda.Span raises AttributeError, as on a GPU).
- tensors on "cuda": a factory call with device="cuda" (torch.ones(4, device="cuda")), .cuda() and
  .to("cuda") give a FakeCudaTensor: a CPU tensor whose .device / .is_cuda say cuda:<current device>,
  whose results stay on "cuda", and whose .cpu() gives a plain CPU tensor. nn.Linear(..., device="cuda")
  therefore has "cuda" parameters.
- torch.profiler.profile drops ProfilerActivity.CUDA: the CPU operators stand for the GPU's kernels.
- NCCL: dist.is_nccl_available() is True; init_process_group("cpu:gloo,cuda:nccl" or "nccl",
  device_id=...) initialises Gloo underneath, and dist.get_backend() answers the backend asked for.

An op on a "cuda" tensor and a CPU tensor of one or more dimensions raises, as on a GPU.

Not modelled: asynchrony (a real GPU runs behind the host), memory, several devices in one process (every
"cuda" tensor is on the current device), torch's own CUDA internals (FSDP2's backward uses CUDA streams and
ops in C++ that the fake cannot reach), NCCL kernels in profiler traces. Factory calls with device="cuda" are
caught by a TorchFunctionMode, which is per thread: in a thread started after install they raise, as on a
CPU build ("Torch not compiled with CUDA"), rather than pass silently.

calls() counts every use of the fake by the first caller frame outside torch and this file, as
(file relative to the repository, function qualname, what was used): the branches it was reached from.
commlib never imports this module.
"""

import contextlib
import functools
import os
import sys
import threading
import time
from collections import Counter

import torch
import torch.distributed as dist
from torch.overrides import TorchFunctionMode

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TORCH = os.path.dirname(os.path.abspath(torch.__file__))
_HERE = os.path.abspath(__file__)
_CALLS: Counter = Counter()
_state = threading.local()  # the stream of `with torch.cuda.stream(s)`, per thread as in torch
_STATE = {"gpus": 0, "device": 0, "initialized": False, "backend": None}


_COMPREHENSIONS = (".<locals>.<listcomp>", ".<locals>.<dictcomp>", ".<locals>.<setcomp>", ".<locals>.<genexpr>")


def _note(what: str) -> None:
    """Count `what` under the first frame that is neither torch's nor this file's."""
    f = sys._getframe(1)
    while f is not None:
        name = os.path.abspath(f.f_code.co_filename)
        if name != _HERE and not name.startswith(_TORCH):
            break
        f = f.f_back
    if f is None:
        return
    name = os.path.abspath(f.f_code.co_filename)
    where = os.path.relpath(name, ROOT) if name.startswith(ROOT + os.sep) else os.path.basename(name)
    function = f.f_code.co_qualname
    for inner in _COMPREHENSIONS:  # Python 3.12 inlines comprehensions into their function (PEP 709): so do we
        function = function.replace(inner, "")
    _CALLS[where, function, what] += 1


def calls() -> dict:
    """{(file, qualname, what): count} since install (or reset)."""
    return dict(_CALLS)


def reset() -> None:
    _CALLS.clear()


def _index(device) -> int:
    """The device index of None (the current device), an int, "cuda", "cuda:1" or a torch.device."""
    if device is None:
        return _STATE["device"]
    if isinstance(device, int):
        return device
    device = torch.device(device)
    return _STATE["device"] if device.index is None else device.index


def _device(index=None) -> torch.device:
    return torch.device("cuda", _index(index))


def _is_cuda(device) -> bool:
    if isinstance(device, torch.device):
        return device.type == "cuda"
    if isinstance(device, str):
        return device.split(":")[0] == "cuda"
    return False


# ------------------------------------------------------------------------------------ tensors on "cuda"
# property getters come as a fresh method-wrapper each time: compare them with ==, not `is`
_DEVICE, _IS_CUDA = torch.Tensor.device.__get__, torch.Tensor.is_cuda.__get__
_UNWRAPPED = (torch.Tensor.grad.__get__, torch.Tensor._base.__get__)


class FakeCudaTensor(torch.Tensor):
    """A CPU tensor that says it is on cuda:<current device>; results of ops on it stay FakeCudaTensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func == _DEVICE:
            _note("Tensor.device")
            return _device()
        if func == _IS_CUDA:
            _note("Tensor.is_cuda")
            return True
        if func is torch.Tensor.cpu or (func is torch.Tensor.to and _to_device(args, kwargs) == "cpu"):
            _note("Tensor.cpu")
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            return out.as_subclass(torch.Tensor) if out is args[0] else out
        if func is torch.Tensor.cuda or (func is torch.Tensor.to and _to_device(args, kwargs) == "cuda"):
            rest = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking")}
            return args[0] if not rest else args[0].to(**rest)
        if func in _UNWRAPPED:  # torch's default leaves these as they are
            with torch._C.DisableTorchFunctionSubclass():
                out = func(*args, **kwargs)
            return out if out is None else _wrap(out)
        if func not in _CROSS_DEVICE and not isinstance(func, (torch._ops.OpOverload, torch._ops.OpOverloadPacket)):
            _same_device(func, args, kwargs)  # (torch.ops.*: torch's own internals, e.g. FSDP2's, that the fake
                                              # cannot reach all of: their CPU buffers would be CUDA on a GPU)
        return super().__torch_function__(func, types, args, kwargs)


# a real GPU refuses an op on a CUDA tensor and a CPU tensor of one or more dimensions (a CPU scalar, 0-dim, is
# allowed); these take both on purpose
_CROSS_DEVICE = {torch.Tensor.copy_, torch.Tensor.to, torch.Tensor.__setitem__, torch.Tensor.__getitem__,
                 torch.Tensor.data.__set__, torch.Tensor.grad.__set__, torch.Tensor.set_, torch.Tensor.new_tensor,
                 torch.Tensor.__repr__, torch.Tensor.__format__, torch.Tensor.__reduce_ex__, torch.Tensor.__deepcopy__,
                 torch._has_compatible_shallow_copy_type}


def _same_device(func, args, kwargs) -> None:
    flat = []
    for a in list(args) + list(kwargs.values()):
        flat.extend(a if isinstance(a, (list, tuple)) else [a])
    cpu = [a for a in flat if isinstance(a, torch.Tensor) and not isinstance(a, FakeCudaTensor) and a.dim() > 0]
    if cpu and any(isinstance(a, FakeCudaTensor) for a in flat):
        raise RuntimeError(f"Expected all tensors to be on the same device, but found at least two devices, cuda:0 "
                           f"and cpu! ({getattr(func, '__name__', func)}: the fake CUDA refuses it as a GPU would)")


def _wrap(t):
    if isinstance(t, torch.Tensor) and not isinstance(t, FakeCudaTensor):
        return t.as_subclass(FakeCudaTensor)
    if isinstance(t, (tuple, list)):
        return type(t)(_wrap(x) for x in t)
    return t


def _to_device(args, kwargs):
    """'cuda', 'cpu' or None: where Tensor.to(*args, **kwargs) moves the tensor."""
    candidates = [kwargs.get("device")] + list(args[1:2])
    for c in candidates:
        if isinstance(c, (str, torch.device)):
            return "cuda" if _is_cuda(c) else "cpu"
        if isinstance(c, torch.Tensor):
            return "cuda" if c.is_cuda else "cpu"
    return None


class _CudaFactories(TorchFunctionMode):
    """device="cuda" in a factory call, .cuda() and .to("cuda") on a plain tensor -> a FakeCudaTensor on CPU."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if "device" in kwargs and _is_cuda(kwargs["device"]):
            _note("device='cuda'")
            _STATE["initialized"] = True
            return _wrap(func(*args, **{**kwargs, "device": "cpu"}))
        if func is torch.Tensor.cuda and not isinstance(args[0], FakeCudaTensor):
            _STATE["initialized"] = True
            rest = {k: v for k, v in kwargs.items() if k not in ("device", "non_blocking", "memory_format")}
            return _wrap(args[0].clone(**rest))
        if func is torch.Tensor.to and not isinstance(args[0], FakeCudaTensor) and _to_device(args, kwargs) == "cuda":
            _STATE["initialized"] = True
            rest = [a for a in args[2:] if isinstance(a, torch.dtype)] + \
                [a for a in args[1:2] if isinstance(a, torch.dtype)]
            out = args[0].to(*rest, **{k: v for k, v in kwargs.items() if k in ("dtype", "copy")})
            return _wrap(out if out is not args[0] else out.clone())
        return func(*args, **kwargs)


# ------------------------------------------------------------------------------------ torch.cuda
class Event:
    """torch.cuda.Event on the host clock: record() notes time.perf_counter()."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        _note("cuda.Event")
        self.enable_timing, self.t = enable_timing, None

    def record(self, stream=None):
        if stream is not None and not isinstance(stream, Stream):
            raise TypeError(f"Event.record takes a torch.cuda.Stream, got {type(stream).__name__}")
        _note("Event.record")
        self.t = time.perf_counter()

    def synchronize(self):
        _note("Event.synchronize")

    def query(self):
        return True

    def wait(self, stream=None):
        _note("Event.wait")

    def elapsed_time(self, end_event) -> float:
        """Milliseconds from this event to end_event (as CUDA: both recorded, both timed)."""
        _note("Event.elapsed_time")
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("Both events must be created with argument 'enable_timing=True'.")
        if self.t is None or end_event.t is None:
            raise RuntimeError("Both events must be recorded before calculating elapsed time.")
        return (end_event.t - self.t) * 1e3


class Stream:
    """torch.cuda.Stream: work is done when it is issued, so waits are no-ops that only check their argument."""

    def __init__(self, device=None, priority=0):
        _note("cuda.Stream")
        self.device = _device(device)

    def wait_stream(self, stream):
        if not isinstance(stream, Stream):
            raise TypeError(f"wait_stream takes a torch.cuda.Stream, got {type(stream).__name__}")
        _note("Stream.wait_stream")

    def wait_event(self, event):
        _note("Stream.wait_event")

    def record_event(self, event=None):
        event = event or Event()
        event.record(self)
        return event

    def synchronize(self):
        _note("Stream.synchronize")

    def query(self):
        return True


_DEFAULT_STREAMS: dict = {}


def current_stream(device=None):
    _note("cuda.current_stream")
    index = _index(device)
    return getattr(_state, "stream", None) or default_stream(index)


def default_stream(device=None):
    index = _index(device)
    if index not in _DEFAULT_STREAMS:
        _DEFAULT_STREAMS[index] = Stream(device=index)
    return _DEFAULT_STREAMS[index]


class stream:
    """with torch.cuda.stream(s): current_stream() is s inside."""

    def __init__(self, s):
        _note("cuda.stream")
        self.s = s

    def __enter__(self):
        self.before, _state.stream = getattr(_state, "stream", None), self.s
        return self.s

    def __exit__(self, *exc):
        _state.stream = self.before


def _fn(name, body):
    @functools.wraps(body)
    def wrapper(*args, **kwargs):
        _note(f"cuda.{name}")
        return body(*args, **kwargs)
    return wrapper


def _set_device(device):
    index = _index(device)
    if not 0 <= index < _STATE["gpus"]:
        raise RuntimeError(f"CUDA error: invalid device ordinal {index} (the fake has {_STATE['gpus']} GPUs)")
    _STATE["device"], _STATE["initialized"] = index, True


CUDA = {
    "is_available": _fn("is_available", lambda: _STATE["gpus"] > 0),
    "device_count": _fn("device_count", lambda: _STATE["gpus"]),
    "set_device": _fn("set_device", _set_device),
    "current_device": _fn("current_device", lambda: _STATE["device"]),
    "is_initialized": _fn("is_initialized", lambda: _STATE["initialized"]),
    "get_device_name": _fn("get_device_name", lambda device=None: "Fake GPU (CPU underneath)"),
    "synchronize": _fn("synchronize", lambda device=None: None),
    "Event": Event, "Stream": Stream, "current_stream": current_stream, "default_stream": default_stream,
    "stream": stream,
}


# ------------------------------------------------------------------------------------ the profiler
class _Profile(torch.profiler.profile):
    """torch.profiler.profile without ProfilerActivity.CUDA (a CPU build warns on every op when asked for it):
    the fake GPU's kernels are the CPU operators, which the CPU activity records."""

    def __init__(self, *args, activities=None, **kwargs):
        cuda = torch.profiler.ProfilerActivity.CUDA
        if activities is not None and cuda in activities:
            _note("profiler CUDA")
            activities = [a for a in activities if a != cuda]
        super().__init__(*args, activities=activities, **kwargs)


# ------------------------------------------------------------------------------------ NCCL -> Gloo
def _init_process_group(real, backend=None, *args, **kwargs):
    _note("dist.init_process_group")
    asked = str(backend)
    if "nccl" in asked:
        device = kwargs.pop("device_id", None)
        if device is not None and not _is_cuda(device):
            raise ValueError(f"device_id must be a cuda device with NCCL, got {device!r}")
        backend = "gloo"
        _STATE["backend"] = asked
    return real(backend, *args, **kwargs)


def _get_backend(real, group=None):
    got = real(group)
    return _STATE["backend"] if _STATE["backend"] and group is None else got


def _is_nccl_available():
    _note("dist.is_nccl_available")
    return True


_SAVED: list = []


def install(gpus: int = 4) -> None:
    """Patch torch.cuda, torch.distributed and tensor creation in this process (and in processes forked later)."""
    if _SAVED:
        raise RuntimeError("the fake CUDA is already installed")
    _STATE.update(gpus=gpus, device=0, initialized=False, backend=None)
    patches = [(torch.cuda, name, value) for name, value in CUDA.items()]
    patches += [(torch.profiler, "profile", _Profile), (dist, "is_nccl_available", _is_nccl_available),
                (dist, "init_process_group", functools.partial(_init_process_group, dist.init_process_group)),
                (dist, "get_backend", functools.partial(_get_backend, dist.get_backend))]
    for module, name, value in patches:
        _SAVED.append((module, name, getattr(module, name)))
        setattr(module, name, value)
    # module.cuda() / .to("cuda") must change the parameters' type, not only their data: swap them
    _SAVED.append((torch.__future__, "swap", torch.__future__.get_swap_module_params_on_conversion()))
    torch.__future__.set_swap_module_params_on_conversion(True)
    mode = _CudaFactories()
    mode.__enter__()
    _SAVED.append((None, "mode", mode))


def uninstall() -> None:
    while _SAVED:
        module, name, value = _SAVED.pop()
        if module is None:
            value.__exit__(None, None, None)
        elif module is torch.__future__:
            torch.__future__.set_swap_module_params_on_conversion(value)
        else:
            setattr(module, name, value)
    _DEFAULT_STREAMS.clear()


@contextlib.contextmanager
def installed(gpus: int = 4):
    install(gpus)
    try:
        yield
    finally:
        uninstall()
