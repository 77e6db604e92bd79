"""Where does a step's time go? live.py profiles a run of this course's ranks under torch.profiler and splits it
into compute, communication, their overlap, exposed communication and idle time, and times collectives the
ways chapter 9 compares (chunked, segmented, asynchronous). reader.py opens a torch.profiler trace (streaming,
bounded, typed), parallel.py reads many in worker processes, traces.py turns them into collective calls (CPU/Gloo
and CUDA/NCCL); diagnose.py applies the three steps to them and finds stragglers (`python -m commlib diagnose`; stragglers.py
follows the wait chain to the root); graph.py, regroup.py, pricing.py and whatif.py replay them with new prices;
synthetic.py writes traces of any size and scale.py holds how diagnose scales (benchmarks/diagnose_scale.py)."""

from commlib.profiling.intervals import intersect, length, union  # noqa: F401
from commlib.profiling.jobs.live import (COMM_KERNEL_WORDS, COMM_PREFIXES, Interval, breakdown,  # noqa: F401
                                    intervals_from_events, profile, time_async, time_in_chunks,
                                    time_ring_segments)
from commlib.profiling.traces import TraceError  # noqa: F401  (the modules: profiling.traces, profiling.diagnose)
