"""The import path notebooks, README and benchmarks use; the what-if lives in profiling/replay/whatif.py."""

from commlib.profiling.replay.whatif import Scenario, format_report, whatif  # noqa: F401
