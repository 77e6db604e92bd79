"""Tick labels in the notebook's language. matplotlib draws fixed tick labels afresh from their formatter each
time a figure is drawn, so localize's pass over the texts already drawn never reaches them: a figure sets its
named ticks (rows of a timeline, stages, 'loopback') here, translated where they are made, in a font that draws
Chinese (language.cjk_font); English, or no such font: exactly ax.set_xticks / set_yticks."""

from __future__ import annotations

from commlib.ui import language


def set_ticks(ax, which: str, positions, labels, **kwargs) -> None:
    """ax.set_{which}ticks(positions, labels, **kwargs) with each label through tr when Chinese can be drawn."""
    font = language.cjk_font() if language.language() is not None else None
    said = [language.tr(str(label)) for label in labels] if font else list(labels)
    getattr(ax, f"set_{which}ticks")(positions, said, **kwargs)
    if font and said != [str(label) for label in labels]:
        getattr(ax, f"{which}axis").set_tick_params(labelfontfamily=[font, "DejaVu Sans"])
