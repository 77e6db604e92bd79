"""Overlapping gradient communication with the backward pass: the names chapters 5, 6, 9 and 11 call.

    simulate, Timeline, Span, make_buckets, buckets_from_layers   the timeline model (commlib/cost/timeline.py)
    BucketedDDP                                                   a small DDP, inside a rank (commlib/parallel/ddp.py)

A face only: the code lives in those two modules.
"""

from commlib.cost.timeline import (DDP_BUCKET_CAP_MB, DDP_FIRST_BUCKET_MB, Span, Timeline,  # noqa: F401
                                   buckets_from_layers, make_buckets, simulate)
from commlib.parallel.ddp import BucketedDDP  # noqa: F401
