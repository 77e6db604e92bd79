"""Where does a step's time go? A trace is read one way, in stages; no stage imports a later one:

    read/        the only code that opens a trace: files, reader (streaming, bounded, typed), parallel
                 (many files in worker processes), fields, kernels, annotations, streams, steps
    groups.py    process groups; calls.py: a rank's records -> collective Calls; traces.py: -> RankTrace, load
    model.py, overlap.py, stragglers.py, checks.py   the analyses, one a file: records of numbers and short
                 codes, never sentences; diagnosis.py runs them (`python -m commlib diagnose`)
    replay/      graph, critical, regroup, pricing, whatif: the job replayed with new prices
    report/      diagnosis's and the what-if's reports as text and JSON, every sentence (words.py); it computes
                 nothing
    jobs/        the live side, apart: live (torch.profiler in ranks), recording, synthetic, emulated_job, scale

Interval arithmetic on spans (union, intersect, length, overlap) is the ground floor's: commlib.cost.intervals.
Chapters, README and benchmarks import these modules by their own paths (no module re-exports another)."""

from commlib.profiling.jobs.live import (COMM_KERNEL_WORDS, COMM_PREFIXES, Interval, breakdown,  # noqa: F401
                                         intervals_from_events, profile, time_async, time_in_chunks,
                                         time_ring_segments)
from commlib.profiling.traces import TraceError  # noqa: F401  (the modules: profiling.traces, profiling.diagnosis)
