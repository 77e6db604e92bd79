"""Chapter 9's scale figure: diagnose's time against the events in a job's traces, log-log, beside Holistic
Trace Analysis' where the benchmark measured it. A thin drawing over commlib.profiling.jobs.scale."""

from __future__ import annotations

import matplotlib.pyplot as plt

from commlib.profiling.jobs.scale import hta_label, series
from commlib.ui.language import speaks


@speaks
def diagnose_scale(data: dict, live: dict | None = None, ax=None):
    """Seconds against events (all ranks), log-log: diagnose end to end (wall and CPU seconds), Holistic Trace
    Analysis with its default and its batched parser, a line of slope 1 (linear time) through diagnose's largest
    size, and `live` (profiling.jobs.scale.live_point: end to end too, so it compares with the first curve) if given."""
    s = series(data)
    if ax is None:
        _, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.loglog(s["events"], s["diagnose_s"], "o-", label="python -m commlib diagnose (end to end)")
    for key, style, what in (("hta_s", "s-", "default parser"), ("hta_batched_s", "D--", "batched ijson")):
        hta = [(n, t) for n, t in zip(s["events"], s[key]) if t]
        if hta:
            ax.loglog(*zip(*hta), style, color="C3", label=f"{hta_label(data['meta'])}, {what}")
    cpu = s["diagnose_cpu_s"]
    if all(cpu):
        ax.loglog(s["events"], cpu, "^--", color="C0", alpha=0.6, label="diagnose, CPU seconds")
    n0, n1 = s["events"][0], s["events"][-1]
    t0 = min([s["diagnose_s"][-1]] + (cpu[-1:] if all(cpu) else [])) * n0 / n1
    ax.loglog([n0, n1], [t0, t0 * n1 / n0], ":", color="grey", label="linear time")
    if live:
        ax.loglog([live["events"]], [live["seconds"]], "*", ms=14, color="C2",
                  label="diagnose end to end, here, now")
    ax.set_xlabel("trace events (2 ranks)")
    ax.set_ylabel("seconds")
    meta = data["meta"]
    ax.set_title(f"{meta['machine']}, load {meta['load_before'][0]:.2f} to {meta['load_after'][0]:.2f}",
                 fontsize=9)
    ax.legend(fontsize=8)
    ax.figure.tight_layout()
    return ax.figure
