"""Benchmarks that run inside ranks: sweeps.py is nccl-tests' method (python -m commlib bench); emulated.py times
the node-aware algorithms on an emulated cluster of nodes beside commlib.topology's model (chapter 3);
wording.py says in words, from the numbers, whether a measurement agrees with its model."""

from commlib.bench.wording import agreement, machine, versus  # noqa: F401

from commlib.bench.sweeps import (BENCHED_OPS, DTYPES, IMPLEMENTATIONS, algorithms_for, combine_repeats,  # noqa: F401
                                 format_table, loopback_link, measure_gamma, parse_size, run_sweep, sizes, sweep)
