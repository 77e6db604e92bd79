"""The what-if's report (replay/whatif.py's whatif()) as strict JSON and as text under 100 columns; it
formats, it computes nothing."""

from __future__ import annotations

import math

from commlib import columns
from commlib.profiling.report.diagnosis import note
from commlib.profiling.report.words import indent, note_text, wrap
from commlib.ui.language import language, tr


def json_report(report: dict) -> dict:
    """Strict JSON (null, never NaN), without the timelines' spans; notes and doubts (checks.doubts' records) in
    words, as diagnose's --json says them: doubts as [{kind, text}]."""
    def clean(x):
        if isinstance(x, float):
            return x if math.isfinite(x) else None
        if isinstance(x, dict):
            return {str(k): clean(v) for k, v in x.items() if k != "spans"}
        if isinstance(x, (list, tuple)):
            return [clean(v) for v in x]
        return x
    said = {**report, "notes": [note_text(n) for n in report["notes"]]}
    if "doubts" in report:
        said["doubts"] = [{"kind": d["kind"], "text": note_text(d)} for d in report["doubts"]]
    return clean(said)


def _profiler(report: dict) -> list[str]:
    """The profiler's line: the traced step against the untraced one, and what the scenarios did about it."""
    p = report.get("profiler")
    if "profiler" not in report:
        return []
    if p is None:
        return wrap(tr("profiler: no untraced step with these traces: the scenarios are of the job as traced, the "
                       "profiler's own time included (nothing corrected)"), 98)
    where = tr("the traces' commlib_untraced" if p["source"] == "traces" else "given")
    t, u = p["traced_us"] / 1e3, p["untraced_us"] / 1e3
    lo, ops, each = p.get("floor", 0.5), p.get("ops"), p.get("per_op_us", 0.0)
    if p["compute_factor"] == 1 and 1 < p["ratio"] <= 1 + p.get("noise", 0.0):
        return wrap(tr(f"profiler: traced steps {t:.2f} ms, untraced {u:.2f} ms ({where}), x{p['ratio']:.2f}: within "
                       f"the noise of a few steps ({p['noise']:.0%}), nothing corrected"), 98)
    if p["compute_factor"] == 1 and p["ratio"] > 1 and ops is not None:
        return wrap(tr(f"profiler: traced steps {t:.2f} ms, untraced {u:.2f} ms ({where}), x{p['ratio']:.2f}: more "
                       f"than the profiler adds to {ops:.0f} ops a step ({each:g} us each at most, the compute "
                       f"x{lo:.2f}): the calls, the gaps between ops, or a host busy while it recorded, which slows "
                       "all of these: nothing corrected; record again"), 98)
    if p["compute_factor"] == 1 and p["ratio"] > 1:
        return wrap(tr(f"profiler: traced steps {t:.2f} ms, untraced {u:.2f} ms ({where}), x{p['ratio']:.2f}: more "
                       "than the compute can explain at x0.5 (the calls, the gaps between ops, or the noise of a "
                       "few steps): nothing corrected; a host busy while it recorded slows all of these: record "
                       "again"), 98)
    if p["compute_factor"] == 1:
        return wrap(tr(f"profiler: traced steps {t:.2f} ms, untraced {u:.2f} ms ({where}), x{p['ratio']:.2f}: no "
                       "faster without the profiler, nothing corrected"), 98)
    return wrap(tr(f"profiler: traced steps {t:.2f} ms, untraced {u:.2f} ms ({where}), x{p['ratio']:.2f}: every "
                   f"scenario's compute x{p['compute_factor']:.3f} (x{lo:.2f} at most), the identity replay so scaled "
                   f"{p['calibrated_us'] / 1e3:.2f} ms"), 98)


def format_report(report: dict) -> str:
    """The scenarios side by side (the slowest rank's split), then each one's assumptions, under 100 columns; in
    the learner's language (language.tr; the JSON never is)."""
    first = report["scenarios"][0]["step_us"]   # 0 where every event is at one instant: no ratio
    out = wrap(tr(f"# {len(report['ranks'])} rank(s) of a {report['world_size']}-rank {report['backend']} job, "
                  f"measured on {report['measured_on'] or 'unknown hardware'}"), 98, "", "#   ")
    k = report.get("steps", 1)
    if k > 1:
        out.append(tr(f"# per training step, averaged over {k} steps (the traces hold {k})"))
    rows = [[tr(h) for h in ("scenario", "step ms", "x meas.", "compute ms", "exposed ms", "waiting ms", "comm path")]]
    for s in report["scenarios"]:
        slow = max(s["ranks"].values(), key=lambda o: o["step_us"])
        rows.append([tr(s["name"])[:37], f"{s['step_us'] / 1e3:.2f}",
                     f"{s['step_us'] / first:.2f}" if first > 0 else "-",
                     f"{slow['compute_us'] / k / 1e3:.2f}", f"{slow['exposed_us'] / k / 1e3:.2f}",
                     f"{slow['waiting_us'] / k / 1e3:.2f}", f"{s['critical_path']['comm_share']:.0%}"])
    out += columns.fit(rows, [38, 9, 8, 11, 11, 11, 10], "<>>>>>>", 100)
    out += wrap(tr("step: the slowest rank's; compute, exposed, waiting: that rank's; comm path: the share of "
                         "transfers on the critical path (cut at that rank's start, so never longer than its step); "
                         "waiting: the part of its communication spent waiting for a later peer, on the "
                         "communication lane: hidden under compute or exposed, it adds to the step only through "
                         "exposed (more, smaller buckets wait more, mostly hidden)"), 98)
    out += _profiler(report)
    if report["scenarios"][2:]:
        here = [s for s in report["scenarios"][2:] if s.get("cluster") == "this machine"]
        out += wrap(tr("scenarios marked (this machine): the emulated cluster whose ranks share this machine's cores; "
                       "the others: a real cluster, each rank on a processor of its own") if here else
                    tr("scenarios: a real cluster, each rank on a processor of its own"), 98)
    colon = "：" if language() else ": "   # a Chinese sentence takes the full-width colon
    for s in report["scenarios"][2:]:
        for line in s["assumptions"]:
            out += wrap(f"{tr(s['name'])}{colon}{tr(line)}", 98, "", "  ")
    label = tr("note: ")
    for n in report["notes"]:
        out += wrap(note(n), 98, label, indent(label))
    doubts = report.get("doubts") or []
    if doubts:   # diagnose's notes, in its words: the replay replays what the traces recorded
        out.append(tr(f"the replay is only as sound as the traces; diagnose's note(s) on them ({len(doubts)}):"))
        for d in doubts:
            out += wrap(note(d), 98, label, indent(label))
    return "\n".join(out)
