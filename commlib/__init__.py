"""commlib: communication overhead in distributed deep-learning training, runnable on a laptop.

    import commlib as cl
    with cl.Cluster(world_size=4) as c:
        c.run(fn)                      # fn on every rank of a local torch.distributed job
"""

from commlib.cluster import Cluster, ClusterTimeout, RankDied, RankError
from commlib.torchrun import init_from_env

__all__ = ["Cluster", "ClusterTimeout", "RankDied", "RankError", "init_from_env"]
__version__ = "0.1.0"
