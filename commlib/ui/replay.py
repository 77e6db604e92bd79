"""A Flight Recorder dump replayed rank by rank: one collective at a time, the ranks that differ or are missing
marked. A thin layer over commlib.cluster.flight_recorder.replay_steps."""

from __future__ import annotations

import html

import ipywidgets as W

from commlib.cluster import flight_recorder
from commlib.ui.language import language, speaks, tr


def step_html(step: dict, position: int | None = None, total: int | None = None) -> str:
    """One collective, one line per rank; the odd ranks in red (a different call) or grey (no record).
    position/total: where it stands in the replay ('entry 1 of 3', counted from 1 like the collectives)."""
    rows = []
    for rank, call in step["calls"].items():
        odd = rank in step["odd"]
        color = "#c0392b" if odd and call else ("#888888" if odd else "#222222")
        text = html.escape(call) if call else tr("no record: never called it")
        mark = " &larr;" if odd else ""
        rows.append(f"<div style='font-family:monospace;color:{color}'>rank {rank}: {text}{mark}</div>")
    title = f"process group {html.escape(step['group'])}, collective #{step['seq']}"
    if position is not None:
        title = f"entry {position} of {total}: {title}"
    verdict = tr("every rank agrees" if not step["odd"] else f"ranks {step['odd']} differ or are missing")
    return f"<b>{tr(title)}</b>{'：' if language() else ': '}{verdict}" + "".join(rows)


@speaks
def replay(snapshots: dict) -> W.VBox:
    """A slider over the collectives in the ranks' records (error.snapshots, or snapshot() per rank). It starts at
    the first entry and counts from 1, as the collectives are numbered; the text under it names the first entry
    where the ranks differ, which Play reaches in turn."""
    steps = flight_recorder.replay_steps(snapshots)
    if not steps:
        return W.VBox([W.HTML("<i>no Flight Recorder records to replay</i>")])
    n = len(steps)
    first_odd = next((i + 1 for i, s in enumerate(steps) if s["odd"]), None)
    slider = W.IntSlider(value=1, min=1, max=n, description="entry", continuous_update=True)
    play = W.Play(value=1, min=1, max=n, interval=900)
    W.jslink((play, "value"), (slider, "value"))
    view = W.HTML(step_html(steps[0], 1, n))
    slider.observe(lambda change: setattr(view, "value", step_html(steps[change["new"] - 1], change["new"], n)),
                   names="value")
    where = f"the ranks first differ at entry {first_odd}" if first_odd else "the ranks agree at every entry"
    return W.VBox([W.HBox([play, slider]), W.HTML(f"<i>{n} entries; {where}</i>"), view])
