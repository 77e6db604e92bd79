"""How a job and its traces say which emulated network they ran on: one small record, as text and as JSON.

    s = parse("2x1@20e6")                 # NODESxGPUS[xNICS]@BYTES_PER_S -> Spec(2, 1, 1, 20e6)
    str(s)                                # "2x1x1@2e+07"
    s.to_json(); Spec.from_json(text)     # {"nodes", "gpus_per_node", "nics_per_node", "bandwidth", "latency", "kind"}
    from_environment()                    # inside a rank started by `network run` or a Cluster(network=...)
    record(prof)                          # into a torch.profiler trace: top-level key "commlib_network"
    from_trace(doc)                       # that key back from a trace's top level (None where absent)

The environment variable ENV holds the JSON; a trace written by a profiler that called record() holds the same
JSON object under TRACE_KEY. Both sides of the course read it here: the network that ran a job (commlib.network)
and the what-if that replays its traces (commlib.profiling). Importing this module imports no torch.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import asdict, dataclass

from commlib import _validate as check

ENV = "COMMLIB_NETWORK"
TRACE_KEY = "commlib_network"
MAX_NODES, MAX_GPUS, MAX_NICS = 64, 64, 16
BANDWIDTH = (1e4, 1e11)   # bytes/s: 10 kB/s to 100 GB/s, inside what HTB shapes exactly (64-bit rates)
MAX_LATENCY = 10.0        # seconds
MAX_RANKS = 64            # GPUs (namespaces) of a kernel network, as many as a Cluster's ranks: 64 x 1 built in ~10 s
KINDS = ("kernel", "paced")
_TEXT = re.compile(r"^\s*(\d+)x(\d+)(?:x(\d+))?@([0-9.eE+\-]+)\s*$")
_MAX_JSON = 4096          # characters: the record is a handful of numbers


def checked(nodes, gpus_per_node, nics_per_node, bandwidth, latency) -> tuple[int, int, int, float, float]:
    """An emulated network's shape and links, checked (ValueError/TypeError naming the parameter and what it
    allows): what a Network is built from and what a Spec records, so both refuse the same things."""
    nodes = check.integer("nodes", nodes, 1, MAX_NODES)
    gpus_per_node = check.integer("gpus_per_node", gpus_per_node, 1, MAX_GPUS)
    nics_per_node = check.integer("nics_per_node", nics_per_node, 1, MAX_NICS)
    if nics_per_node > gpus_per_node:
        raise ValueError(f"nics_per_node must be <= gpus_per_node ({gpus_per_node}): GPU i uses NIC i mod k, "
                         f"so NICs beyond the GPUs carry nothing; got {nics_per_node}")
    if nodes * gpus_per_node > MAX_RANKS:
        raise ValueError(f"nodes x gpus_per_node must be <= {MAX_RANKS} (one rank, and one namespace, per GPU), "
                         f"got {nodes} x {gpus_per_node} = {nodes * gpus_per_node}")
    bandwidth = check.number("bandwidth", bandwidth, BANDWIDTH[0], high=BANDWIDTH[1], unit="bytes/s")
    latency = check.number("latency", latency, 0.0, high=MAX_LATENCY, unit="seconds")
    return nodes, gpus_per_node, nics_per_node, bandwidth, latency


@dataclass(frozen=True)
class Spec:
    """nodes x gpus_per_node GPUs, nics_per_node NICs per node of `bandwidth` bytes/s per direction."""
    nodes: int
    gpus_per_node: int
    nics_per_node: int = 1
    bandwidth: float = 0.0
    latency: float = 0.0
    kind: str = "kernel"

    def __post_init__(self):
        values = checked(self.nodes, self.gpus_per_node, self.nics_per_node, self.bandwidth, self.latency)
        for name, value in zip(("nodes", "gpus_per_node", "nics_per_node", "bandwidth", "latency"), values):
            object.__setattr__(self, name, value)  # frozen: the checked values replace the given ones
        object.__setattr__(self, "kind", check.choice("kind", self.kind, KINDS))

    @property
    def world_size(self) -> int:
        return self.nodes * self.gpus_per_node

    def __str__(self) -> str:
        return f"{self.nodes}x{self.gpus_per_node}x{self.nics_per_node}@{self.bandwidth:g}"

    def to_dict(self) -> dict:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, d) -> "Spec":
        """From a dict with the keys of to_dict() (extra keys are refused: a record from elsewhere)."""
        if not isinstance(d, dict):
            raise TypeError(f"a network record must be a JSON object, got {type(d).__name__}")
        extra = sorted(set(d) - set(cls.__dataclass_fields__))
        if extra:
            raise ValueError(f"a network record has keys {', '.join(cls.__dataclass_fields__)}; got also {extra}")
        return cls(**d)

    @classmethod
    def from_json(cls, text) -> "Spec":
        if not isinstance(text, str):
            raise TypeError(f"a network record must be JSON text, got {type(text).__name__}")
        if len(text) > _MAX_JSON:
            raise ValueError(f"a network record is a few numbers; got {len(text)} characters")
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as e:
            raise ValueError(f"a network record must be JSON: {e.msg} at character {e.pos}") from None


def parse(text, name: str = "network") -> Spec:
    """'NODESxGPUS[xNICS]@BYTES_PER_S' (e.g. 2x1@20e6, 4x2x2@80e6) -> Spec; ValueError naming `name` otherwise."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be text like 2x1@20e6 (NODESxGPUS[xNICS]@BYTES_PER_S), got {type(text).__name__}")
    m = _TEXT.match(text)
    if not m:
        raise ValueError(f"{name} must look like 2x1@20e6 or 4x2x2@80e6 (NODESxGPUS[xNICS]@BYTES_PER_S), "
                         f"got {check.shown(text)}")
    try:
        bandwidth = float(m.group(4))
    except ValueError:
        raise ValueError(f"{name}: the bandwidth after @ must be a number of bytes/s, got {m.group(4)!r}") from None
    try:
        return Spec(int(m.group(1)), int(m.group(2)), int(m.group(3) or 1), bandwidth)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{name}: {e}") from None


def from_environment(environ=None) -> Spec | None:
    """The network this process runs on, from ENV (None where unset)."""
    text = (os.environ if environ is None else environ).get(ENV)
    return Spec.from_json(text) if text else None


def record(prof, spec: Spec | None = None) -> bool:
    """Write spec (default: from_environment()) into a torch.profiler.profile's trace as TRACE_KEY -> whether
    there was one to write. Call it before the trace is exported."""
    spec = spec if spec is not None else from_environment()
    if spec is None:
        return False
    prof.add_metadata_json(TRACE_KEY, spec.to_json())
    return True


def from_trace(doc) -> Spec | None:
    """TRACE_KEY from a trace's decoded top level (a dict), or None where the trace does not say."""
    value = doc.get(TRACE_KEY) if isinstance(doc, dict) else None
    if value is None:
        return None
    return Spec.from_dict(value) if isinstance(value, dict) else Spec.from_json(value)
