"""What a run in a notebook's language shows a learner, recorded (COMMLIB_RECORD, commlib.ui.language.record) so
that a test can read it for English left behind (tests/test_zh_english.py). In a notebook's kernel started with
IPYTHONDIR=ipython_dir(folder) (book/i18n.py's run of the edition, book/nbrecord.py's nbval run), IPython's
startup file calls start(), which records

  - every text matplotlib draws (ticks, legends, titles, annotations): Text.draw;
  - every widget's caption, tooltip, option labels and read-out, after each cell;
  - every checker's answer to wrong answers: each checker the chapter calls (its own arguments) is called again
    with the values its own comparisons test for (each answers.close target: the mistakes its hints name), each
    option it lists to a name it does not know, and a few odd answers; a checker of the learner's function
    (fn(cluster, fn)) with functions that return nothing, 0 or raise, on a cluster of its own; the verdicts' text
    is recorded ("hint"), never printed.

Nothing of it runs in a learner's kernel; a rank records only what tr gives (language.record).
"""

from __future__ import annotations

import functools
import inspect
import sys

from commlib.ui.language import record

_state = {"started": False, "sweeping": False}


STARTUP = "from commlib.ui import shown\n\nshown.start()\n"


def ipython_dir(folder) -> str:
    """An IPython folder under folder whose startup file calls start(): a kernel started with IPYTHONDIR set to it
    records what it shows. -> its path."""
    from pathlib import Path

    startup = Path(folder) / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-commlib-shown.py").write_text(STARTUP, encoding="utf-8")
    return str(Path(folder) / "ipython")


def start() -> None:
    """Hook what a kernel shows (above); once per process, and only in a kernel with COMMLIB_RECORD set."""
    import os

    shell = getattr(sys.modules.get("IPython"), "get_ipython", lambda: None)()
    if _state["started"] or shell is None or not os.environ.get("COMMLIB_RECORD"):
        return
    _state["started"] = True
    from matplotlib.text import Text

    from commlib.ui.language import cjk_font

    record("font", cjk_font() or "none")  # none: the figures keep their English labels (language.localize)

    draw = Text.draw

    def recorded_draw(self, renderer, *args, **kwargs):
        if self.get_visible():
            record("drawn", self.get_text())
        return draw(self, renderer, *args, **kwargs)

    Text.draw = recorded_draw
    shell.events.register("post_run_cell", lambda *_: _record_widgets())
    _wrap_checkers()


def widget_texts(state: dict, kind: str) -> list[str]:
    """What a learner reads on a widget, from its traits or its saved state: its caption, tooltip, placeholder, the
    labels of its options or tabs, and a read-out's text (HTML, Label). kind: the widget's class or model name."""
    said = [state.get(k) for k in ("description", "tooltip", "description_tooltip", "placeholder")]
    said += list(state.get("_options_labels") or ()) + list(state.get("titles") or ())
    if kind.removesuffix("Model") in ("HTML", "HTMLMath", "Label"):
        said.append(state.get("value"))
    return [s for s in said if isinstance(s, str) and s.strip()]


def _record_widgets() -> None:
    from ipywidgets.widgets.widget import _instances

    for widget in list(_instances.values()):
        for text in widget_texts(getattr(widget, "_trait_values", {}), type(widget).__name__):
            record("widget", text)


# ----- the checkers' hints for wrong answers

def _checkers():
    """(module, name, function) of every checker of commlib.exercises (a public function returning a Verdict)."""
    import importlib
    import pkgutil

    import commlib.exercises as ex

    for info in pkgutil.iter_modules(ex.__path__):
        module = importlib.import_module(f"commlib.exercises.{info.name}")
        for name, fn in list(vars(module).items()):
            if inspect.isfunction(fn) and not name.startswith("_") and fn.__module__ == module.__name__ and \
                    inspect.signature(fn).return_annotation in ("Verdict", "'Verdict'"):
                yield module, name, fn


def _wrap_checkers() -> None:
    import commlib.exercises as ex

    for module, name, fn in list(_checkers()):
        wrapped = _sweeping(fn)
        setattr(module, name, wrapped)
        if getattr(ex, name, None) is fn:
            setattr(ex, name, wrapped)


def _none(*args, **kwargs):
    return None


def _zero(*args, **kwargs):
    return 0


def _raise(*args, **kwargs):
    raise RuntimeError("42")  # no words of its own in the hint that quotes it


ODD = (None, "", -1, 0, 1, 1e30, "α")  # "α": a name no checker knows, and no English word in the hint that quotes it


def _sweeping(fn):
    """fn, which after each call by a chapter calls fn again with wrong answers and records what it says."""
    first = next(iter(inspect.signature(fn).parameters))

    @functools.wraps(fn)
    def checker(*args, **kwargs):
        verdict = fn(*args, **kwargs)
        if not _state["sweeping"] and args:
            _state["sweeping"] = True
            try:
                if first == "cluster":  # the learner's functions run on a cluster of the sweep's own: the
                    with type(args[0])(world_size=args[0].world_size) as c:  # chapter's keeps its own history
                        _sweep(fn, [(c, wrong, *args[2:]) for wrong in (_none, _zero, _raise)], kwargs)
                else:
                    _sweep(fn, _wrong_answers(fn, args, kwargs), kwargs)
            except Exception:  # a sweep that cannot run leaves the chapter as it is
                pass
            finally:
                _state["sweeping"] = False
        return verdict

    return checker


def _sweep(fn, calls: list[tuple], kwargs: dict) -> None:
    for args in calls:
        try:
            said = fn(*args, **kwargs)
        except Exception:  # a wrong answer that makes a checker raise is its own tests' matter
            continue
        record("hint", repr(said), fn.__name__)


def _wrong_answers(fn, args: tuple, kwargs: dict) -> list[tuple]:
    """Argument tuples with the answer replaced by every value the checker's comparisons test (answers.close's
    targets, found by one call with an answer nothing equals), every option it accepts (_options), and ODD."""
    from commlib.exercises import answers

    seen, module = [], sys.modules[fn.__module__]
    close = answers.close

    def spy(value, *targets, **kw):
        seen.extend(t for t in targets if isinstance(t, (int, float)))
        return close(value, *targets, **kw)

    holders = [h for h in {answers, module} if getattr(h, "close", None) is close]
    for holder in holders:
        holder.close = spy
    try:
        fn(-123456.789, *args[1:], **kwargs)
    except Exception:
        pass
    finally:
        for holder in holders:
            holder.close = close
    values = []
    for v in [*seen, *_options(fn, args, kwargs), *ODD]:
        if not any(v is w or (type(v) is type(w) and v == w) for w in values):
            values.append(v)
    return [(v, *args[1:]) for v in values]


def _options(fn, args: tuple, kwargs: dict) -> list:
    """The options a checker that asks for one of several accepts, read from what it says to a name it does not
    know ("choose one of ('ring', 'tree')..."); [] for any other checker."""
    import ast

    try:
        said = fn("α", *args[1:], **kwargs).message
    except Exception:
        return []
    text = said.partition("choose one of ")[2]
    for i, ch in enumerate(text):
        if ch in ")]":
            try:
                value = ast.literal_eval(text[:i + 1])
            except (ValueError, SyntaxError):
                continue
            return list(value) if isinstance(value, (tuple, list)) else []
    return []
