"""commlib.ui.animation: one frame per step of a real ring all-reduce, drawn from its trace, in a player that
needs no network."""

import re

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from commlib.ui import animation  # noqa: E402
from commlib.ui import plots
from commlib.algorithms import trace


@pytest.fixture(scope="module")
def ring(cluster4, ring_traces):
    p = cluster4.world_size
    states = trace.replay(ring_traces, p)
    return ring_traces, states, p, animation.ring_all_reduce(states, ring_traces, p)


def test_one_frame_per_step_each_drawn_from_the_trace(ring):
    traces, states, p, anim = ring
    assert len(anim.frames) == len(anim.captions) == len(states) == 2 * (p - 1) + 1  # the start + every step
    for k in range(len(states)):
        ax = plots.ring_step(states, traces, k, p)
        assert anim.captions[k] == ax.get_title() and anim.captions[k].startswith(f"step {k}/{2 * (p - 1)}")
        assert anim.frames[k] == animation._png(ax.figure), f"frame {k} is not ring_step(..., {k})"
        plt.close(ax.figure)
    assert len(set(anim.frames)) == len(anim.frames)  # every step changes the picture
    before = plt.get_fignums()
    animation.ring_all_reduce(states, traces, p)
    assert plt.get_fignums() == before  # the player is the output, not a leftover figure


def test_the_player_holds_every_frame_and_nothing_from_the_network(ring):
    anim = ring[3]
    page = anim._repr_html_()
    uris = re.findall(r'data:image/png;base64,[A-Za-z0-9+/=]+', page)
    assert len(uris) == len(anim.frames) and len(set(uris)) == len(uris)
    assert page.index(uris[0]) < page.index("<script>")  # the first frame is a plain <img>: shown without scripts
    assert "http" not in page and all(u.startswith("data:") for u in re.findall(r'(?:src|href)="([^"]*)"', page))
    assert page == anim.to_html()  # no random id: the same frames give the same HTML
    assert f"step 0 of {len(anim.frames) - 1}" in page and repr(anim).startswith(f"Animation({len(anim.frames)} frames")


def test_frames_and_captions_must_pair_up():
    with pytest.raises(ValueError, match="one caption per frame"):
        animation.Animation((b"png",), ("a", "b"))
    with pytest.raises(ValueError, match="at least one frame"):
        animation.Animation((), ())
