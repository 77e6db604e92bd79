"""How diagnose scales: the committed benchmark (benchmarks/diagnose_scale.py) and a live point on this machine.

    data = load_scale()               # {"meta": {machine, load, ...}, "rows": [...]}: the benchmark's full run
    point = live_point(20_000)        # diagnose() on 2 synthetic ranks of 20k events each, timed here
"""

from __future__ import annotations

import json
import os
import tempfile
import time
from pathlib import Path

SCALE = Path(__file__).resolve().parents[2] / "benchmarks" / "diagnose_scale.json"


def load_scale(path=SCALE) -> dict:
    """The committed figures of benchmarks/diagnose_scale.py (its docstring says what each row measures)."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path} not found: run benchmarks/diagnose_scale.py from a clone of the course")
    with open(path) as f:
        return json.load(f)


def series(data: dict, case: str = "gpu") -> dict:
    """One case's rows as lists for a figure: events (all ranks), diagnose's CLI seconds, and HTA's seconds
    (None where it was not run or failed)."""
    rows = [r for r in data["rows"] if r["case"] == case]
    return {"events": [r["ranks"] * r["events_per_rank"] for r in rows], "diagnose_s": [r["cli_s"] for r in rows],
            "diagnose_cpu_s": [r.get("cli_cpu_s") for r in rows], "call_s": [r["call_s"] for r in rows],
            "hta_s": [r["hta_s"] for r in rows]}


def live_point(events_per_rank: int = 20_000, ranks: int = 2) -> dict:
    """diagnose() (the Python call) on `ranks` synthetic GPU traces written to a temporary folder, timed on this
    machine: events (all ranks), seconds, events per second."""
    from commlib.profiling import synthetic
    from commlib.profiling.diagnose import diagnose

    with tempfile.TemporaryDirectory(prefix="commlib_scale_") as d:
        synthetic.write_job(os.path.join(d, "job"), ranks, events_per_rank, "gpu")
        t = time.perf_counter()
        report = diagnose(os.path.join(d, "job"))
        seconds = time.perf_counter() - t
    events = ranks * events_per_rank
    return {"events": events, "seconds": seconds, "events_per_s": events / seconds, "calls": len(report["calls"])}


def _cpu(row: dict) -> str:
    return "-" if row.get("cli_cpu_s") is None else f"{row['cli_cpu_s']:.2f}"


def summary(data: dict) -> list[str]:
    """The committed run in a few lines: the machine and its load, time per size (wall and CPU seconds, events
    per second, peak memory, HTA beside), the growth between sizes, and the many-ranks case."""
    meta, rows = data["meta"], data["rows"]
    out = [f"measured on {meta['machine']}, {meta['date']}, load {meta['load_before'][0]:.1f} before and "
           f"{meta['load_after'][0]:.1f} after (whole machine)"]
    gpu = [r for r in rows if r["case"] == "gpu"]
    for r in gpu:
        n = r["ranks"] * r["events_per_rank"]
        hta = f"; HTA {r['hta_s']:.1f} s ({r['hta_s'] / r['cli_s']:.1f}x as long)" if r["hta_s"] else ""
        out.append(f"{r['ranks']} x {r['events_per_rank']:>9,} events: {r['cli_s']:6.2f} s "
                   f"({_cpu(r):>6} s CPU), {n / r['cli_s']:>7,.0f}/s, "
                   f"{r['peak_rss_bytes'] / 1e6:4.0f} MB{hta}")
    for a, b in zip(gpu, gpu[1:]):
        grow = b["events_per_rank"] / a["events_per_rank"]
        cpu = f", {b['cli_cpu_s'] / a['cli_cpu_s']:.1f}x the CPU time" if a.get("cli_cpu_s") else ""
        out.append(f"{grow:,.0f}x the events: {b['cli_s'] / a['cli_s']:.1f}x the time{cpu} (start-up included)")
    for r in rows:
        if r["ranks"] > 2:
            out.append(f"{r['ranks']} ranks x {r['events_per_rank']:,} events: {r['cli_s']:.2f} s, peak "
                       f"{r['peak_rss_bytes'] / 1e6:.0f} MB (ranks read in parallel processes)")
    return out
