"""Step-through animations that need no kernel: PNG frames in one self-contained HTML player.

A static page (the book), a notebook whose scripts do not run (untrusted, or on a code host) and a live
notebook all show the first frame as a plain <img>; where scripts run, buttons and a slider step or play
through every frame. The HTML loads nothing from the network and holds no random id, so the same frames
give the same HTML.
"""

from __future__ import annotations

import base64
import html
import io
import json
from dataclasses import dataclass

from commlib.ui import plots
from commlib.algorithms.trace import Event
from commlib.ui.language import language, tr

_PLAYER = """<div class="commlib-animation" style="display:inline-block;text-align:center;max-width:100%">
<img src="{first}" alt="{caption}" style="max-width:100%">
<div class="commlib-animation-controls" hidden style="margin:4px 0">
<button type="button" data-go="first" title="{first_step}">&laquo; {first_word}</button>
<button type="button" data-go="back" title="{previous_step}">&lsaquo; {back}</button>
<button type="button" data-go="play" title="{play_every_step}">{play}</button>
<button type="button" data-go="next" title="{next_step}">{next} &rsaquo;</button>
<button type="button" data-go="last" title="{last_step}">{last_word} &raquo;</button>
<input type="range" min="0" max="{last}" value="0" step="1" aria-label="{step}" style="vertical-align:middle">
<span class="commlib-animation-step">{step_0}</span>
</div>
<script>
(function (root) {{
  // frames[0] is the <img>'s own src, so that the first frame shows where scripts do not run
  const img = root.querySelector("img"), slider = root.querySelector("input"), label = root.querySelector("span");
  const frames = [img.src].concat({rest}), captions = {captions};
  const play = root.querySelector("[data-go=play]");
  let k = 0, timer = null;
  function show(i) {{
    k = Math.max(0, Math.min(frames.length - 1, i));
    img.src = frames[k]; img.alt = captions[k]; slider.value = k; label.textContent = {step_k};
    root.dataset.frame = k;
  }}
  function stop() {{ clearInterval(timer); timer = null; play.textContent = {play_js}; }}
  const go = {{first: () => show(0), back: () => show(k - 1), next: () => show(k + 1), last: () => show(frames.length - 1),
    play: () => {{
      if (timer) return stop();
      if (k === frames.length - 1) show(0);
      play.textContent = {pause_js};
      timer = setInterval(() => {{ show(k + 1); if (k === frames.length - 1) stop(); }}, {interval});
    }}}};
  root.querySelectorAll("button").forEach(b => b.addEventListener("click", () => {{
    if (b.dataset.go !== "play") stop();
    go[b.dataset.go]();
  }}));
  slider.addEventListener("input", () => {{ stop(); show(parseInt(slider.value, 10)); }});
  root.querySelector(".commlib-animation-controls").hidden = false;
  show(0);
}})(document.currentScript.parentElement);
</script>
</div>"""


# the player's words: English as they read in the HTML, translated in the notebook's language (tr)
WORDS = {"first_step": "first step", "first_word": "first", "previous_step": "previous step", "back": "back",
         "play_every_step": "play every step", "play": "play", "next_step": "next step", "next": "next",
         "last_step": "last step", "last_word": "last", "step": "step", "pause": "pause"}


def _words(last: int) -> dict:
    """The player's words for str.format: its captions, and the step counter ('step 0 of N') as HTML and as the
    JavaScript expression that rewrites it."""
    said = {key: html.escape(tr(word)) for key, word in WORDS.items()}
    said.update(play_js=json.dumps(tr("play"), ensure_ascii=False),
                pause_js=json.dumps(tr("pause"), ensure_ascii=False))
    template = tr("step {} of {}")
    if language() is None or template.count("{0}") != 1 or template.count("{1}") != 1:
        said.update(step_0=f"step 0 of {last}", step_k='"step " + k + " of " + (frames.length - 1)')
    else:  # "step {} of {}" as the catalog says it, its holes filled by the script
        head, mid, tail = (json.dumps(part, ensure_ascii=False)
                           for part in template.replace("{1}", "{0}").split("{0}"))
        said.update(step_0=html.escape(tr(f"step 0 of {last}")),
                    step_k=f"{head} + k + {mid} + (frames.length - 1) + {tail}")
    return said


@dataclass(frozen=True)
class Animation:
    """Frames (PNG bytes) with a caption each, shown interval_ms apart when played. Displays as the HTML player."""

    frames: tuple[bytes, ...]
    captions: tuple[str, ...]
    interval_ms: int = 1500

    def __post_init__(self):
        if not self.frames or len(self.frames) != len(self.captions):
            raise ValueError(f"frames and captions: one caption per frame, at least one frame "
                             f"(got {len(self.frames)} frames, {len(self.captions)} captions)")

    def to_html(self) -> str:
        uris = ["data:image/png;base64," + base64.b64encode(f).decode("ascii") for f in self.frames]
        captions = [tr(c) for c in self.captions]  # in the notebook's language (the browser draws any script)
        return _PLAYER.format(first=uris[0], caption=html.escape(captions[0]), last=len(uris) - 1,
                              **_words(len(uris) - 1),
                              rest=json.dumps(uris[1:]),
                              captions=json.dumps(captions).replace("</", "<\\/"),
                              interval=int(self.interval_ms))

    _repr_html_ = to_html

    def __repr__(self) -> str:
        return f"Animation({len(self.frames)} frames: {self.captions[0]!r} ... {self.captions[-1]!r})"


def _png(fig, dpi: int = 100) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    return buf.getvalue()


def ring_all_reduce(states, events_by_rank: list[list[Event]], world_size: int, interval_ms: int = 1500) -> Animation:
    """Every step of a ring all-reduce from its real traces: frame k is plots.ring_step(states, events_by_rank, k, p),
    for k = 0 .. len(states)-1 (the start and 2(p-1) steps); states = commlib.algorithms.trace.replay(events_by_rank, p)."""
    import matplotlib.pyplot as plt

    ax = None
    frames, captions = [], []
    try:
        for k in range(len(states)):
            ax = plots.ring_step(states, events_by_rank, k, world_size, ax=ax)
            frames.append(_png(ax.figure))
            captions.append(ax.get_title())
    finally:
        if ax is not None:
            plt.close(ax.figure)  # the player is the output, not the figure at its last step
    return Animation(tuple(frames), tuple(captions), interval_ms)
