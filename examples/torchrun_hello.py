"""The same rank functions as in the notebooks, under torchrun (one node or several).

    torchrun --standalone --nproc-per-node=4 examples/torchrun_hello.py
    torchrun --nnodes=2 --node-rank=R --nproc-per-node=8 --rdzv-backend=c10d \
             --rdzv-endpoint=HEAD_NODE:29500 examples/torchrun_hello.py
"""

import sys

import torch.distributed as dist

import commlib as cl
from commlib.cluster import demos


def main() -> None:
    cl.init_from_env()
    report = demos.hello()
    # One write per line: the ranks share the launcher's stdout, and print() writes the newline separately.
    sys.stdout.write(f"[rank {report['rank']}] {report}\n")
    sys.stdout.flush()
    assert report["all_reduce_sum"] == report["expected"], report
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
