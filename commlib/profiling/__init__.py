"""Where does a step's time go? live.py profiles a run of this course's ranks under torch.profiler and splits it
into compute, communication, their overlap, exposed communication and idle time, and times collectives the
ways chapter 9 compares (chunked, segmented, asynchronous)."""

from commlib.profiling.live import (COMM_KERNEL_WORDS, COMM_PREFIXES, Interval, breakdown, intersect,  # noqa: F401
                                    intervals_from_events, length, profile, time_async, time_in_chunks,
                                    time_ring_segments, union)
