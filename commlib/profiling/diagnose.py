"""The import path chapters 9 and 10, README and the benchmarks use: diagnose() lives in profiling/diagnosis.py,
format_report() in profiling/report/diagnosis.py."""

from commlib.profiling.diagnosis import diagnose  # noqa: F401
from commlib.profiling.report.diagnosis import format_report  # noqa: F401
