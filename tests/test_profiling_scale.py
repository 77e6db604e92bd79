"""commlib.profiling.jobs.scale and synthetic: the committed benchmark figures read back as the chapter prints them,
a live point counts what it read, and synthetic traces have the size and shape asked for."""

import json

from commlib.profiling.jobs import scale, synthetic
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


def _data(load=(1.47, 1.0, 1.0)):
    row = {"case": "gpu", "ranks": 2, "cli_cpu_s": 1.0, "call_s": 0.5, "peak_rss_bytes": 2e8,
           "load_1min": [1.47, 1.5], "json_load_s": 8.0}
    rows = [{**row, "events_per_rank": n, "cli_s": s, "hta_s": 5 * s, "hta_rss_bytes": 5e8, "hta_batched_s": 4 * s,
             "hta_batched_rss_bytes": 3e8} for n, s in ((10_000, 0.4), (100_000, 0.8), (1_000_000, 4.0))]
    rows.append({**row, "case": "64 ranks", "ranks": 64, "events_per_rank": 100_000, "cli_s": 14.0,
                 "peak_rss_bytes": 2.9e8, "hta_s": None})
    return {"meta": {"machine": "x86_64, 2 cores", "date": "2026-12-04", "load_before": list(load),
                     "load_after": [1.5, 1.0, 1.0], "hta_version": "traceinsight 0.6.1"}, "rows": rows}


def test_the_summary_names_the_sizes_it_compares_hta_both_ways_and_json_load():
    lines = scale.summary(_data())
    assert "10x the events (2 x 10k -> 2 x 100k): 2.0x the time, 1.0x the CPU time, start-up included" in lines
    assert "10x the events (2 x 100k -> 2 x 1M): 5.0x the time, 1.0x the CPU time, start-up included" in lines
    assert "  HTA 0.6.1, default parser: 20.0 s (5.0x as long), 500 MB" in lines
    assert "  HTA 0.6.1, batched ijson: 16.0 s (4.0x as long), 300 MB" in lines
    assert "  json.load of the same files 8.00 s: diagnose takes 0.50x as long" in lines
    assert "64 ranks x 100k events: 14.00 s, peak 290 MB (200 MB for 2 ranks)" in lines
    assert all(len(line) < 100 for line in lines)
    assert not any("carried" in line for line in lines)
    carried = _data()
    carried["meta"]["hta_from"] = ("HTA's figures carried from the run of 2026-12-04 (load 3.1): HTA could not run "
                                   "in this one")
    assert carried["meta"]["hta_from"] in scale.summary(carried)   # HTA's figures from another run: said


def test_the_figure_keeps_the_loads_decimals_and_labels_the_star_as_end_to_end():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from commlib.ui.scale import diagnose_scale

    fig = diagnose_scale(_data(), {"events": 40_000, "seconds": 0.5})
    ax = fig.axes[0]
    assert "load 1.47 to 1.50" in ax.get_title()
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    assert {"HTA 0.6.1, default parser", "HTA 0.6.1, batched ijson", "diagnose end to end, here, now"} <= set(labels)
    plt.close(fig)
