"""The pure models of what communication costs: no torch, no plotting.

    model.py      the alpha-beta(-gamma) model of one collective on one link: time, bytes, bus factors, fitting
    registry.py   the one registry of algorithms: which op each runs, who implements it, what it costs
    schedules.py  who sends to whom in each algorithm (shared with the code that runs them)
    links.py      link presets with their sources, and published measurements (Published)
    timeline.py   the overlap timeline model: DDP's buckets, one backward and one communication stream
    intervals.py  interval arithmetic on (start, end) spans: union, intersect, length, overlap (not imported here)
Across nodes and NICs: commlib.topology. Planning whole jobs: commlib.plan.
"""

from commlib.cost.links import LINKS, PUBLISHED, Link, Published  # noqa: F401
from commlib.cost.model import (ALGORITHMS, FAMILY, OPS, PAIRS, POWER_OF_TWO_ONLY, as_link, breakdown,  # noqa: F401
                                bus_factor, bytes_sent_by_rank, bytes_sent_per_rank, check_gamma, check_nbytes,
                                collective_time, critical_path, crossover_bytes, fit_alpha_beta, pipelined_ring_time)
from commlib.cost.registry import REGISTRY, Algorithm, register  # noqa: F401
from commlib.cost.schedules import (binary_tree, check_p, double_binary_tree, fold_to_power_of_two,  # noqa: F401
                                    halving_ranges, is_power_of_two, shard_sizes, tree_height)
