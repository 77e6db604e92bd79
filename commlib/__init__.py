"""commlib: communication overhead in distributed deep-learning training, runnable on a laptop.

    import commlib as cl
    with cl.Cluster(world_size=4) as c:
        c.run(fn)                      # fn on every rank of a local torch.distributed job

One package per layer: cluster (the local ranks), algorithms (collectives from send/recv), cost and topology
(pure models), plan (the planner), parallel and compression (live, checked against references), precision,
overlap, profiling, bench, exercises (the checkers), ui (plots, widgets, animation; ui.language: what a
learner reads, in the notebook's language, set_language("zh_CN")).
"""

from commlib.cluster import Cluster, ClusterTimeout, RankDied, RankError, init_from_env
from commlib.ui.language import set_language

__all__ = ["Cluster", "ClusterTimeout", "RankDied", "RankError", "init_from_env", "set_language"]
__version__ = "0.1.0"
