"""The source chapter's three steps on a job's own traces, plus stragglers: diagnose() runs the analyses, one a
file, and gathers their records into one report; it computes and says nothing of its own.

    report = diagnose(["rank0.json", "rank1.json"], hardware="dgx_h100")   # or a folder; -> a dict
    print(format_report(report))     # profiling/report/diagnosis.py: the text and the JSON (json_report)

1. Profile: every collective call on every rank (traces.py).
2. Against the model (model.py): algbw, busbw, measured / model for each call on a hardware preset, given or
   inferred from the GPU's name, or on the emulated network the traces say they ran on; a call more than `far` x its model flagged with a probable cause.
3. Overlap per rank (overlap.py): communication time, the part hidden under compute, the exposed part, the part
   spent waiting for peers, idle time.

Stragglers (stragglers.py): who was late at each collective, by root cause along the wait chain; checks.py: what
the traces cannot all be. Flags, notes and the hardware's why are records ({kind, numbers});
profiling/report/words.py says them, in the text and in the JSON.
"""

from __future__ import annotations

from commlib import _validate
from commlib import plan
from commlib.profiling import checks
from commlib.profiling.model import call_row, model, network_hardware, pick_hardware
from commlib.profiling.overlap import measure
from commlib.profiling.stragglers import find
from commlib.profiling.traces import MAX_BYTES, RankTrace, load


def diagnose(traces, hardware: str | None = None, far: float = 2.0, achievable: bool = True,
             max_bytes: int = MAX_BYTES) -> dict:
    """Traces (files, a folder, or RankTraces from traces.load) -> the report: world_size, ranks,
    hardware, calls (the --json keys, plus kernel, wait_us, flag), overlap per rank, stragglers, noise (each
    group's spread_us and the delays within it, unnamed), notes.
    Files are read in parallel processes, each refused past max_bytes decompressed (traces.load)."""
    far = _validate.number("far", far, low=1.0)   # a call this many times its model is flagged
    _validate.instance("achievable", achievable, bool)
    ranks = traces if traces and all(isinstance(r, RankTrace) for r in traces) else load(traces, max_bytes)
    world = next((r.world_size for r in ranks if r.world_size), None) or len(ranks)
    # the analyses in the order each needs the last one's: stragglers, then overlap (its waits), then the model
    # (model.py, entered once: the hardware, then every call's row, which takes the waits and the overlap's)
    found = find(ranks)
    late, waits = found["stragglers"], found["waits"]
    measured = [measure(r, waits) for r in ranks]
    hardware, why = pick_hardware(ranks, hardware)
    hw = plan.hardware(hardware, max(1, -(-world // 8)), achievable) if hardware else None
    if why["kind"] == "network":   # `network run`'s traces: priced on the emulated network they ran on
        hw, hardware = network_hardware(why["network"]), f"network {why['network']}"
    calls, overlaps, models = [], {}, {}
    for r, (overlap, beside) in zip(ranks, measured):
        overlaps[r.rank] = overlap
        fastest = {}
        for c in r.calls:
            key = (c.op, c.bytes, c.group)
            fastest[key] = min(fastest.get(key, c.duration_us), c.duration_us)
        for i, c in enumerate(r.calls):
            # a call whose group (so its model) is a guess is flagged for waiting only, never against the model
            known = hw is not None and c.group is not None and i not in r.assumed
            m = None
            if known:   # priced once per (op, bytes, group size): a job repeats the same calls step after step
                key = (c.op, c.bytes, c.group_size)
                m = models[key] if key in models else models.setdefault(key, model(c, hw))
            row = call_row(c, m, far, waits.get((c.rank, c.start_us)), beside[i], fastest[(c.op, c.bytes, c.group)])
            if row["flag"] and row["wait_us"] is None and len(ranks) < world:
                row["flag"]["or_missing_peer"] = True
            calls.append(row)
    groups = _groups(ranks)
    notes = checks.doubts(ranks, world, found, calls) + checks.assumed_dtypes(calls)
    return {"world_size": world, "ranks": [r.rank for r in ranks], "backend": ranks[0].backend,
            "hardware": hardware, "hardware_why": why, "calls": calls, "overlap": overlaps,
            "stragglers": late, "noise": {"spread_us": found["spread_us"], "unnamed": found["unnamed"]},
            "groups": groups, "notes": notes}


def _groups(ranks) -> dict:
    """{name: ranks} of the job's process groups that ran a call (the ranks as pg_config lists them)."""
    listed = {g.name: list(g.ranks) for r in ranks for g in r.groups if g.ranks}
    used = sorted({c.group for r in ranks for c in r.calls if c.group is not None}, key=lambda n: (len(n), n))
    return {n: listed.get(n) for n in used}
