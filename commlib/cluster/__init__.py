"""The local process cluster: N persistent ranks (torch.distributed, Gloo on 127.0.0.1; NCCL where each rank
has a GPU) that run functions defined in a notebook, never hang, and say why a run failed.

    core.py      Cluster: start, run(), timeouts, recovery, close
    errors.py    RankError, ClusterTimeout, RankDied
    launcher.py  what a Cluster keeps across restarts: listener, rendezvous store, zygote, temp folder
    worker.py    the zygote and the rank loop;  listener.py  the authenticated listener;  output.py  rank output
    torchrun.py  the same rank functions under torchrun;  envinfo.py  what this machine offers
    demos.py     chapter 0's small rank functions
    flight_recorder.py, dumps.py, p2p_log.py, call_check.py: what each rank records (collectives, dump files,
                 sends/recvs, roots and reduce ops);  matching.py, diagnosis.py: what went wrong, from them
Imports nothing else from commlib.
"""

from commlib.cluster.core import BACKENDS, MAX_TIMEOUT_S, MAX_WORLD_SIZE, OUTPUT_MODES, Cluster, check_host, resolve_backend  # noqa: F401,E501
from commlib.cluster.errors import ClusterTimeout, RankDied, RankError  # noqa: F401
from commlib.cluster.torchrun import init_from_env  # noqa: F401
