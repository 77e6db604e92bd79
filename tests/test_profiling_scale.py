"""commlib.profiling.scale and synthetic: the committed benchmark figures read back as the chapter prints them,
a live point counts what it read, and synthetic traces have the size and shape asked for."""

import json

from commlib.profiling import scale, synthetic
from commlib.profiling import traces as tr


def test_the_committed_figures_cover_the_issue_targets_and_print_within_the_column():
    data = scale.load_scale()
    cases = {(r["case"], r["ranks"], r["events_per_rank"]) for r in data["rows"]}
    assert {("gpu", 2, 10_000), ("gpu", 2, 1_000_000), ("64 ranks", 64, 100_000)} <= cases
    assert data["meta"]["machine"] and len(data["meta"]["load_before"]) == 3
    s = scale.series(data)
    assert s["events"] == sorted(s["events"]) and len(s["events"]) == len(s["diagnose_s"]) >= 2
    lines = scale.summary(data)
    assert all(len(line) < 100 for line in lines) and str(data["meta"]["date"]) in lines[0]


def test_a_live_point_reads_every_rank():
    p = scale.live_point(2_000, ranks=2)
    assert p["events"] == 4_000 and p["calls"] > 0 and p["events_per_s"] == p["events"] / p["seconds"]


def test_synthetic_traces_have_the_size_and_shape_asked_for(tmp_path):
    paths = synthetic.write_job(str(tmp_path), 2, 5_000, "gpu")
    events = json.load(open(paths[0]))["traceEvents"]
    assert 5_000 <= len(events) < 5_010
    kernels = [e for e in events if e.get("cat") == "kernel"]
    nccl = [e for e in kernels if e["name"].startswith("nccl")]
    assert abs(len(nccl) / len(kernels) - 1 / synthetic.NCCL_EVERY) < 0.01   # ~5% of the kernels are NCCL's
    r = tr.read(paths[1])
    assert (r.rank, r.world_size, r.backend, len(r.calls)) == (1, 2, "nccl", len(nccl))
    again = json.load(open(synthetic.write_rank(str(tmp_path / "again.json"), 0, 2, 5_000)))
    assert again["traceEvents"] == events   # deterministic
