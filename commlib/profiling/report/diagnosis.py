"""diagnose()'s report as strict JSON (json_report), as rows grouped by call (summary) and as
text under 100 characters a line (format_report). It formats what the analyses found (model.py, overlap.py,
stragglers.py, checks.py, gathered by diagnosis.py) and says their records (words.py, describe for a
straggler); it finds nothing."""

from __future__ import annotations

import math
import re

from commlib import columns
from commlib.profiling.read.reader import printable
from commlib.profiling.report.words import flag_text, flat_ring_text, hardware_text, indent, note_text, wrap
from commlib.ui.language import language, tr


def describe(s: dict, groups=None) -> str:
    """One straggler of stragglers.find as a sentence: 'rank 2 late in [2, 3] (group 3) by 180.00 ms over 1
    call(s), because it waited 180.00 ms for rank 1 in [1, 2] (group 2) (inherited: not the root); late because it
    waited: rank 2 <- rank 1 in [1, 2] (group 2) <- rank 0 in [0, 1] (group 1), the root'. groups: {name: ranks}.
    In the learner's language (each piece through language.tr)."""
    groups = groups or {}

    def where(g, size=None):
        ranks = groups.get(g)
        return tr(f"{ranks} (group {g})") if ranks else tr(f"group {g}" + (f" ({size})" if size else ""))

    text = tr(f"rank {s['rank']} late in {where(s['group'], s['group_size'])} by {s['delay_us'] / 1e3:.2f} ms over "
              f"{s['calls']} call(s)")
    why = [tr(f"it waited {b['us'] / 1e3:.2f} ms for rank {b['rank']} in {where(b['group'])}") for b in s["behind"]
           if b["us"] >= 0.01 * s["delay_us"]]
    if why:
        text += tr(", because ") + tr(" and ").join(why)
        text += tr(f"; its own delay {s['own_us'] / 1e3:.2f} ms") if s["own_us"] >= 0.01 * s["delay_us"] else \
            tr(" (inherited: not the root)")
    else:
        text += tr(": its own delay (compute, sleep, anything but waiting)")
    chain = s.get("chain") or []
    if not s.get("root", True) and chain:
        text += tr("; late because it waited: ") + " <- ".join(
            [f"rank {s['rank']}"] + [tr(f"rank {h['rank']} in {where(h['group'])}") for h in chain]) + \
            (tr(", the root") if chain[-1]["root"] else "")
    return text


def note(n) -> str:
    """A note (a record of the report's notes, or a sentence) in the learner's language, piece by piece where it
    nests another record."""
    if isinstance(n, dict) and n["kind"] == "measured_on":
        return tr("measured on: ") + hardware(n["why"])
    if isinstance(n, dict) and n["kind"] == "flat_ring_nics":
        return ("" if language() else " ").join(tr(s) for s in flat_ring_text(n))
    return tr(note_text(n))


def hardware(why: dict) -> str:
    """Why the calls are priced on a preset, or on none, in the learner's language."""
    text = tr(hardware_text({**why, "unpriced": False}))
    return text + (tr(": --hardware PRESET prices the calls") if why.get("unpriced") else "")


def flag(f: dict) -> str:
    """A call's flag in the learner's language."""
    late = tr("; or a late peer (not in these traces)") if f.get("or_missing_peer") else ""
    return tr(flag_text({**f, "or_missing_peer": False})) + late


def _noise_line(report: dict) -> str:
    """The straggler line of a job whose delays all lie within its own call-to-call spread."""
    noise = report.get("noise") or {}
    if not noise.get("unnamed"):
        return tr("stragglers: none found")
    s = noise["unnamed"][0]
    return tr(f"stragglers: none above the noise: the last rank to arrive changes from call to call, late by "
              f"{noise['spread_us'].get(s['group'], 0.0) / 1e3:.2f} ms (median) in group {s['group']}; the largest "
              f"delay, rank {s['rank']}'s {s['delay_us'] / 1e3:.2f} ms over {s['calls']} call(s), is within it")


def json_report(report: dict) -> dict:
    """The --json object: the report with start_us relative to the earliest call of the job, flags, notes and the
    hardware's why in words (English: the JSON is never translated); strict JSON (null for a value that is
    unknown or not finite: json.dumps(..., allow_nan=False) accepts it)."""
    t0 = min((c["start_us"] for c in report["calls"]), default=0.0)
    isfinite = math.isfinite   # rows are flat: no recursion, and no call per value (20k rows of 17)
    calls = [{k: v if type(v) is not float or isfinite(v) else None for k, v in c.items()} for c in report["calls"]]
    for c in calls:
        c["start_us"] -= t0
        if c["flag"] is not None:
            c["flag"] = flag_text(c["flag"])
    rest = _finite({k: v for k, v in report.items() if k != "calls"})
    rest["overlap"] = {str(k): v for k, v in rest["overlap"].items()}
    rest["hardware_why"] = hardware_text(report["hardware_why"])
    rest["notes"] = [note_text(n) for n in report["notes"]]
    return {k: calls if k == "calls" else rest[k] for k in report}


def _finite(x):
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_finite(v) for v in x]
    return x


def _f(x, fmt=".1f", none="-"):
    return none if x is None else format(x, fmt)


def summary(report: dict) -> list[dict]:
    """Calls grouped by (op, bytes, process group, its size, algorithm): count, mean duration, busbw, model
    ratio."""
    groups = {}
    for c in report["calls"]:
        key = (c["op"], c["bytes"], c["group"], c["group_size"], c["algorithm"])
        groups.setdefault(key, []).append(c)
    rows = []
    for (op, nbytes, group, p, algo), cs in groups.items():
        mean = sum(c["duration_us"] for c in cs) / len(cs)
        bus = [c["busbw_GBps"] for c in cs if c["busbw_GBps"] is not None]
        ratios = [c["model_ratio"] for c in cs if c["model_ratio"] is not None]
        rows.append({"op": op, "bytes": nbytes, "group": group, "group_size": p, "algorithm": algo, "calls": len(cs),
                     "mean_us": mean, "busbw_GBps": sum(bus) / len(bus) if bus else None,
                     "model_ratio": sum(ratios) / len(ratios) if ratios else None,
                     "flagged": sum(1 for c in cs if c["flag"])})
    return sorted(rows, key=lambda r: -r["mean_us"] * r["calls"])


def group_label(name, size) -> str:
    """'4 (2)': a process group's name and size; '?' where the group is not known."""
    return f"{'?' if name is None else name} ({_f(size, 'd', '?')})" if name is not None or size else "?"


def format_report(report: dict, limit: int = 12) -> str:
    """The report as text, under 100 columns a line: calls grouped, flags, overlap, stragglers; in the learner's
    language (language.tr; the JSON never is)."""
    why = hardware(report["hardware_why"])
    out = [tr(f"# {len(report['ranks'])} rank(s) of a {report['world_size']}-rank {report['backend']} job; "
              f"hardware: {report['hardware'] or 'none'}"), f"#   （{why}）" if language() else f"#   ({why})"]
    calls = [[tr(h) for h in ("op", "bytes", "group (size)", "algo", "calls", "mean us", "busbw GB/s", "x model",
                              "flagged")]]
    calls += [[r["op"], _f(r["bytes"], "d"), group_label(r["group"], r["group_size"]), r["algorithm"] or "?",
               str(r["calls"]), f"{r['mean_us']:.1f}", _f(r["busbw_GBps"], ".2f"), _f(r["model_ratio"]),
               str(r["flagged"])] for r in summary(report)[:limit]]
    out += columns.fit(calls, [15, 11, 13, 7, 6, 10, 11, 9, 8], "<>>>>>>>>", 100)  # widths grow with the values
    flags = {}
    for c in report["calls"]:
        if c["flag"]:
            text = flag_text(c["flag"])
            flags.setdefault(re.sub(r"\d+(\.\d+)?", "N", text), []).append((c, text))   # one line per kind
    for cs in flags.values():
        c, _ = cs[0]
        out.append(tr(f"! {len(cs)} call(s) flagged, e.g. rank {c['rank']} {c['op']} {_f(c['bytes'], 'd')} B "
                      f"{c['duration_us']:.0f} us:"))
        out += wrap(flag(c["flag"]), 96, "!   ", "!   ")
    out.append(tr("overlap per rank (ms): comm = waiting for peers + moving data; hidden + exposed = comm"))
    overlap = [[tr(h) for h in ("rank", "comm ms", "waiting ms", "hidden ms", "exposed ms", "idle ms")]]
    overlap += [[str(rank)] + [f"{o.get(k, 0.0) / 1e3:.2f}" for k in ("comm_us", "waiting_us", "hidden_us",
                                                                       "exposed_us", "idle_us")]
                for rank, o in report["overlap"].items()]
    out += columns.fit(overlap, [4, 9, 12, 11, 12, 9], ">>>>>>")
    out += late_lines(report)
    return "\n".join(printable(line) for line in out)   # names from a file: escaped, never a line break


def late_lines(report: dict) -> list[str]:
    """The report's end, as lines under 100 columns: its stragglers, the root first, each with whom it waited for
    (or the noise line where none is named), then its notes; in the learner's language."""
    out = []
    for s in report["stragglers"]:
        out += wrap(tr("straggler: ") + describe(s, report.get("groups")), 98, "", "  ")
    if not report["stragglers"]:
        out += wrap(_noise_line(report), 98, "", "  ")
    label = tr("note: ")
    for n in report["notes"]:
        out += wrap(note(n), 98, label, indent(label))
    return out
