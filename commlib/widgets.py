"""ipywidgets UIs for the notebooks: thin layers over commlib's pure functions and plots."""

from __future__ import annotations

import ipywidgets as W
import matplotlib.pyplot as plt

from commlib import algorithms, plots


def ring_stepper(events_by_rank, world_size: int) -> W.VBox:
    """Play / slider through a real ring all-reduce trace (one list of Events per rank), step by step."""
    states = algorithms.replay(events_by_rank, world_size)
    last = len(states) - 1
    play = W.Play(value=0, min=0, max=last, step=1, interval=1200, description="play")
    slider = W.IntSlider(value=0, min=0, max=last, description="step")
    W.jslink((play, "value"), (slider, "value"))
    out = W.Output()

    def show(step: int) -> None:
        fig, ax = plt.subplots(figsize=(2.0 + 1.6 * world_size, 1.2 + 0.55 * world_size))
        plots.ring_step(states, events_by_rank, step, world_size, ax=ax)
        out.outputs = ()  # replace the picture (works in a kernel and outside one, as in tests)
        out.append_display_data(fig)
        plt.close(fig)

    slider.observe(lambda change: show(change["new"]), names="value")
    show(0)
    return W.VBox([W.HBox([play, slider]), out])
