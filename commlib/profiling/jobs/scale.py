"""How diagnose scales: the committed benchmark (benchmarks/diagnose_scale.py) and a live point on this machine.

    data = load_scale()               # {"meta": {machine, load, ...}, "rows": [...]}: the benchmark's full run
    point = live_point(20_000)        # python -m commlib diagnose on 2 synthetic ranks of 20k events, timed here
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from commlib.profiling.jobs.committed import load_committed
from commlib.ui.language import tr  # the notebook's language (English: as is)

SCALE = Path(__file__).resolve().parents[3] / "benchmarks" / "diagnose_scale.json"


def load_scale(path=SCALE) -> dict:
    """The committed figures of benchmarks/diagnose_scale.py (its docstring says what each row measures)."""
    return load_committed(path, "benchmarks/diagnose_scale.py")


def series(data: dict, case: str = "gpu") -> dict:
    """One case's rows as lists for a figure: events (all ranks), diagnose's CLI seconds, and HTA's seconds with
    its default parser and its batched one (None where it was not run or failed)."""
    rows = [r for r in data["rows"] if r["case"] == case]
    return {"events": [r["ranks"] * r["events_per_rank"] for r in rows], "diagnose_s": [r["cli_s"] for r in rows],
            "diagnose_cpu_s": [r.get("cli_cpu_s") for r in rows], "call_s": [r["call_s"] for r in rows],
            "hta_s": [r["hta_s"] for r in rows], "hta_batched_s": [r.get("hta_batched_s") for r in rows]}


def live_point(events_per_rank: int = 20_000, ranks: int = 2) -> dict:
    """`python -m commlib diagnose` end to end (a fresh process: start-up, reading, analysis, report, as the
    benchmark's curve times it) on `ranks` synthetic GPU traces written to a temporary folder, timed on this
    machine: events (all ranks), seconds, events per second, calls, and the 1-minute load before it."""
    from commlib.profiling.jobs import synthetic

    root = str(Path(__file__).resolve().parents[3])
    env = {**os.environ, "PYTHONPATH": root + os.pathsep + os.environ.get("PYTHONPATH", "")}
    with tempfile.TemporaryDirectory(prefix="commlib_scale_") as d:
        synthetic.write_job(os.path.join(d, "job"), ranks, events_per_rank, "gpu")
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
        t = time.perf_counter()
        out = subprocess.run([sys.executable, "-m", "commlib", "diagnose", os.path.join(d, "job"), "--json"],
                             capture_output=True, text=True, env=env, timeout=600)
        seconds = time.perf_counter() - t
    if out.returncode != 0:
        raise RuntimeError(f"diagnose failed: {out.stderr.strip()[-300:]}")
    events = ranks * events_per_rank
    return {"events": events, "seconds": seconds, "events_per_s": events / seconds,
            "calls": len(json.loads(out.stdout)["calls"]), "load": load}


def _cpu(row: dict) -> str:
    return "-" if row.get("cli_cpu_s") is None else f"{row['cli_cpu_s']:.2f}"


def _k(n: int) -> str:
    return f"{n // 1000:,}k" if n < 10**6 else f"{n // 10**6:,}M"


def hta_label(meta: dict) -> str:
    """'HTA 0.6.1' (the version the benchmark recorded), or 'HTA (version not recorded)'."""
    v = meta.get("hta_version")
    return f"HTA {v.split()[-1]}" if v else "HTA (version not recorded)"


def summary(data: dict) -> list[str]:
    """The committed run in a few lines: the machine and its load, time per size (wall and CPU seconds, peak
    memory summed over the process and its workers, the load then), HTA's two parsers beside and json.load of the
    same files, the growth between sizes (naming them), what memory grows with, and the many-ranks case."""
    meta, rows = data["meta"], data["rows"]
    out = [f"measured on {meta['machine']}, {meta['date']}, load {meta['load_before'][0]:.1f} before and "
           f"{meta['load_after'][0]:.1f} after (whole machine)",
           "MB: peak RSS summed over a tool's processes (diagnose's reader workers, HTA's parser pool)"]
    if meta.get("hta_from"):   # HTA's columns come from another run: said, never mixed silently
        out.append(tr(meta["hta_from"]))
    gpu = [r for r in rows if r["case"] == "gpu"]
    for r in gpu:
        load = f", load {r['load_1min'][0]:.1f}" if r.get("load_1min") else ""
        out.append(f"2 x {_k(r['events_per_rank']):>4} events: {r['cli_s']:6.2f} s ({_cpu(r):>6} s CPU), "
                   f"{r['peak_rss_bytes'] / 1e6:4.0f} MB{load}")
        if r.get("json_load_s"):
            out.append(f"  json.load of the same files {r['json_load_s']:.2f} s: diagnose takes "
                       f"{r['cli_s'] / r['json_load_s']:.2f}x as long")
        for key, what in (("hta", "default parser"), ("hta_batched", "batched ijson")):
            if r.get(key + "_s"):
                out.append(f"  {hta_label(meta)}, {what}: {r[key + '_s']:.1f} s ({r[key + '_s'] / r['cli_s']:.1f}x "
                           f"as long), {r[key + '_rss_bytes'] / 1e6:.0f} MB")
    for a, b in zip(gpu, gpu[1:]):
        grow = b["events_per_rank"] / a["events_per_rank"]
        cpu = f", {b['cli_cpu_s'] / a['cli_cpu_s']:.1f}x the CPU time" if a.get("cli_cpu_s") else ""
        out.append(f"{grow:,.0f}x the events (2 x {_k(a['events_per_rank'])} -> 2 x {_k(b['events_per_rank'])}): "
                   f"{b['cli_s'] / a['cli_s']:.1f}x the time{cpu}, start-up included")
    for r in rows:
        if r["ranks"] > 2:
            same = next((g for g in gpu if g["events_per_rank"] == r["events_per_rank"]), None)
            vs = f" ({same['peak_rss_bytes'] / 1e6:.0f} MB for 2 ranks)" if same else ""
            out.append(f"{r['ranks']} ranks x {_k(r['events_per_rank'])} events: {r['cli_s']:.2f} s, peak "
                       f"{r['peak_rss_bytes'] / 1e6:.0f} MB{vs}")
    return [tr(line) for line in out]  # in the notebook's language (English: as is)
