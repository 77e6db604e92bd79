"""The emulated cluster's network: nodes, GPUs per node and NICs per node on one machine.

    net = Network(nodes=2, gpus_per_node=2, nics_per_node=1, bandwidth=20e6, kind="auto")
    available() -> (bool, reason)                        # can the kernel kind be built here?
    wrap(text)                                           # a reason in lines of the book's column
    with cl.Cluster(world_size=4, network=net) as c: ...  # ranks in their nodes; c.network says what ran

    network.py    Network: arguments, rails and addresses, which kind, up/down, users, what a rank needs
    kernel.py     the kernel kind: a namespace per GPU and per node, veths, bridges, tc HTB, rails by source
    userns.py     the same for an ordinary user: a keeper process in a user namespace of its own
    names.py      whose a namespace is: names, owners, the course's mark inside it, sweeping a dead owner's
    calibrate.py  the link as the course fits it (alpha, beta) from a measured sweep, beside the configured rate
    cli.py        python -m commlib network up | down | clean | run
    run.py        network run: a torchrun script on the emulated nodes (rank.py: one rank, in its GPU)
    spec.py       the record a job and its traces carry of the network they ran on (COMMLIB_NETWORK, 2x1@20e6)
The pacer (kind "paced") is commlib.algorithms.emulation; `emulate(gpus_per_node, bandwidth, latency,
nics_per_node)`, its entry inside ranks, is here. Importing this package imports no torch.
"""

from commlib.network.kernel import NetworkError  # noqa: F401
from commlib.network.network import KINDS, Network, available, emulate, wrap  # noqa: F401
