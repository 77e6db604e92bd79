"""commlib.overlap: the face the chapters import, each name the object of its home module."""

from pathlib import Path

import commlib
from commlib import overlap
from commlib.cost import timeline
from commlib.parallel import ddp


def test_the_face_re_exports_the_model_and_bucketed_ddp_and_defines_nothing():
    for name in ("simulate", "Timeline", "Span", "make_buckets", "buckets_from_layers", "DDP_BUCKET_CAP_MB",
                 "DDP_FIRST_BUCKET_MB"):
        assert getattr(overlap, name) is getattr(timeline, name), name
    assert overlap.BucketedDDP is ddp.BucketedDDP
    assert overlap.simulate.__module__ == "commlib.cost.timeline" and overlap.BucketedDDP.__module__ == "commlib.parallel.ddp"
    lines = (Path(commlib.__file__).parent / "overlap.py").read_text().splitlines()
    assert len(lines) < 40 and not [line for line in lines if line.startswith(("def ", "class "))]
