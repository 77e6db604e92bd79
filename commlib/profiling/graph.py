"""The import path notebooks and benchmarks use; the replay's graph lives in profiling/replay/graph.py."""

from commlib.profiling.replay.graph import build, replay  # noqa: F401
