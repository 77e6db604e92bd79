"""A Flight Recorder dump replayed rank by rank: one collective at a time, the ranks that differ or are missing
marked. A thin layer over commlib.cluster.flight_recorder.replay_steps."""

from __future__ import annotations

import html

import ipywidgets as W

from commlib.cluster import flight_recorder


def step_html(step: dict) -> str:
    """One collective, one line per rank; the odd ranks in red (a different call) or grey (no record)."""
    rows = []
    for rank, call in step["calls"].items():
        odd = rank in step["odd"]
        color = "#c0392b" if odd and call else ("#888888" if odd else "#222222")
        text = html.escape(call) if call else "no record: never called it"
        mark = " &larr;" if odd else ""
        rows.append(f"<div style='font-family:monospace;color:{color}'>rank {rank}: {text}{mark}</div>")
    title = f"process group {html.escape(step['group'])}, collective #{step['seq']}"
    verdict = "every rank agrees" if not step["odd"] else f"ranks {step['odd']} differ or are missing"
    return f"<b>{title}</b>: {verdict}" + "".join(rows)


def replay(snapshots: dict) -> W.VBox:
    """A slider over the collectives in the ranks' records (error.snapshots, or snapshot() per rank)."""
    steps = flight_recorder.replay_steps(snapshots)
    if not steps:
        return W.VBox([W.HTML("<i>no Flight Recorder records to replay</i>")])
    first_odd = next((i for i, s in enumerate(steps) if s["odd"]), 0)
    slider = W.IntSlider(value=first_odd, min=0, max=len(steps) - 1, description="collective",
                         continuous_update=True)
    play = W.Play(value=first_odd, min=0, max=len(steps) - 1, interval=900)
    W.jslink((play, "value"), (slider, "value"))
    view = W.HTML(step_html(steps[first_odd]))
    slider.observe(lambda change: setattr(view, "value", step_html(steps[change["new"]])), names="value")
    return W.VBox([W.HBox([play, slider]), view])
