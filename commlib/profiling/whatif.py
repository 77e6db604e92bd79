"""The import path notebooks, README and benchmarks use; the what-if lives in profiling/replay/whatif.py,
its text in profiling/report/whatif.py."""

from commlib.profiling.replay.whatif import Scenario, whatif  # noqa: F401
from commlib.profiling.report.whatif import format_report  # noqa: F401
