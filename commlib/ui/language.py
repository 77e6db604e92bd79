"""The language commlib speaks to a learner: the checkers' verdicts and hints, the widgets' captions, the plots'
titles, axes and legends. English unless a notebook asks:

    import commlib
    commlib.set_language("zh_CN")     # the zh_CN notebooks' first cell; set_language(None) -> English again

    from commlib.ui.language import tr
    tr("busbw (GB/s)")                # the catalog's translation for the current language
    tr(f"{p} ranks, {n:g} bytes")     # a rendered message: matched against the catalog's templates, "{} ranks,
                                      # {} bytes" -> "{0} 个 rank，{1} 字节", each filled part translated in turn
    tr("step", "step time")           # one English word with two meanings: the msgid under its msgctxt

The catalogs are gettext's, one per package that speaks (locales/<lang>/LC_MESSAGES/commlib/*.po, beside the
book's), compiled when the language is set (Babel). A message the catalog lacks, or marks fuzzy, stays English.
A msgid with {} holes is a template: the checkers keep their f-strings, and the verdict they render is matched
against the templates (the one with the most fixed text first) and rebuilt from the msgstr's {0}, {1}, ..., each
hole's text itself translated (a sentence the checker picked from a table, a name), its numbers left as they are.
A listing no template matches as a whole ("A: 1 ms, B: 2 ms.") is translated item by item.
The system's LANG and LANGUAGE are never read: the English edition prints the same bytes on every machine. The
language set here is passed on in COMMLIB_LANGUAGE, so ranks and commands started afterwards speak it too.
Machine output (--json, CSV, every key) never goes through tr.

With COMMLIB_RECORD set to a folder (book/i18n.py's run of the edition, `course.py test --lang`), every message tr
gives is written there too (record; commlib.ui.shown adds what figures draw, widgets say and checkers answer to
wrong answers); tests/test_zh_english.py reads it.
"""

from __future__ import annotations

import functools
import gettext
import io
import os
import re
import string
from pathlib import Path

from commlib.columns import width  # display columns: a Chinese character takes two

LOCALES = Path(__file__).resolve().parents[2] / "locales"
ENV = "COMMLIB_LANGUAGE"
ENGLISH = (None, "", "en")
_state: dict = {"lang": None, "table": None, "templates": []}
HOLE = "{}"
ITEM = "commlib-item"
CONTEXT = "\x04"  # msgctxt and msgid, joined as gettext's catalogs join them
_CJK = re.compile(r"[\u3400-\u9fff]")


def available(locales: Path | None = None) -> tuple[str, ...]:
    """The languages commlib has catalogs for (besides English)."""
    locales = locales or LOCALES
    return tuple(sorted(p.parent.parent.name for p in locales.glob("*/LC_MESSAGES/commlib") if p.is_dir()))


def catalog(lang: str, locales: Path | None = None) -> tuple[gettext.GNUTranslations, dict[str, tuple[str, bool]]]:
    """The language's catalogs merged and compiled in memory, and {msgid: (msgstr, an item of a listing?)} of
    their templates (fuzzy and untranslated messages left out)."""
    from babel.messages.catalog import Catalog
    from babel.messages.mofile import write_mo
    from babel.messages.pofile import read_po

    merged, holes = Catalog(locale=lang), {}
    for po in sorted(((locales or LOCALES) / lang / "LC_MESSAGES" / "commlib").glob("*.po")):
        if po.stat().st_size > 8 * 2**20:
            raise ValueError(f"{po}: {po.stat().st_size} bytes is not a catalog")
        with open(po, "rb") as f:
            for m in read_po(f, abort_invalid=True):
                if m.id and isinstance(m.id, str) and m.string and not m.fuzzy:
                    merged.add(m.id, m.string, context=m.context)  # a msgctxt's message: tr(message, context)
                    if HOLE in m.id and m.id.replace(HOLE, "").strip() and not m.context:
                        holes[m.id] = (m.string, ITEM in m.flags)
    buf = io.BytesIO()
    write_mo(buf, merged)
    buf.seek(0)
    return gettext.GNUTranslations(buf), holes


def set_language(lang: str | None) -> None:
    """Speak lang from now on ("zh_CN"; None, "" or "en": English), here and in the ranks and commands started
    afterwards. ValueError naming lang and the languages there are when it has no catalogs."""
    if lang in ENGLISH:
        _state.update(lang=None, table=None, templates=[])
        os.environ.pop(ENV, None)
        return
    langs = available()
    if not isinstance(lang, str) or lang not in langs:
        raise ValueError(f"lang: {lang!r} has no catalogs; choose one of {', '.join(langs) or '(none)'} or None "
                         f"for English")
    _state.update(lang=lang, table=None, templates=[])  # compiled when first needed (tr)
    os.environ[ENV] = lang


def language() -> str | None:
    """The language commlib speaks now (None: English)."""
    return _state["lang"]


def templates(holes: dict[str, tuple[str, bool]]) -> list[tuple[re.Pattern, str]]:
    """(the msgid as a pattern, its msgstr) of every template (a msgid with {} holes), the most fixed text first.
    The holes of an item of a listing (flag commlib-item: "{} MiB: {} ms") never span the listing's ", " or "; "."""
    found = []
    for msgid, (msgstr, item) in holes.items():
        hole = "((?:(?!, |; ).)*?)" if item else "(.*?)"
        pattern = hole.join(re.escape(part) for part in msgid.split(HOLE))
        found.append((len(msgid.replace(HOLE, "")), re.compile(f"^{pattern}$", re.DOTALL), msgstr))
    return [(p, s) for _, p, s in sorted(found, key=lambda x: -x[0])]


def tr(message: str, context: str | None = None) -> str:
    """message in the current language: the catalog's translation, or a template's filled in (see above), or
    message itself (English, or a message no catalog has). context: the msgctxt of a word with two meanings
    ("step" as a step's time: context "step time"), looked up as it is, no template."""
    if _state["lang"] is None or not isinstance(message, str) or not message:
        return message
    if context is not None:
        said = _table().pgettext(context, message)
        record("tr", f"{context}{CONTEXT}{message}", said)  # gettext's own key: apart from the word alone
        return said
    if _recording["on"] and not _recording["depth"]:  # a message commlib shows, not a part of one
        _recording["depth"] += 1
        try:
            said = _tr(message)
        finally:
            _recording["depth"] -= 1
        record("tr", message, said)
        return said
    return _tr(message)


def _table() -> gettext.GNUTranslations:
    """The current language's catalog, compiled when first needed (its templates with it)."""
    if _state["table"] is None:
        table, holes = catalog(_state["lang"])
        _state.update(table=table, templates=templates(holes))
    return _state["table"]


def _tr(message: str) -> str:
    text = _table().gettext(message)
    if text != message:
        return text
    for pattern, msgstr in _state["templates"]:
        m = pattern.match(message)
        if m:
            parts = [tr(part) for part in m.groups()]
            if parts == list(m.groups()) and not _CJK.search(msgstr):
                continue  # "{}: {}" around two English parts: nothing of it is translated
            try:
                return _fill(msgstr, parts)
            except (IndexError, KeyError, ValueError):  # a msgstr whose holes do not fit: English, never an error
                return message
    return _by_parts(message)


def _fill(msgstr: str, parts: list[str]) -> str:
    """msgstr.format(*parts), less the space the msgstr keeps beside a hole where the hole's text meets Chinese on
    both sides of it: "{0} 的速度是" filled with 无 reads 无的速度是 (a space parts Chinese from Latin letters and
    digits only); filled with a name (powersgd r=4 的速度是) the space stays."""
    out = []
    for literal, field, spec, _ in string.Formatter().parse(msgstr):
        if out and literal.startswith(" ") and _CJK.search(out[-1][-1:]) and _CJK.match(literal[1:2]):
            literal = literal[1:]
        out.append(literal)
        if field is not None:
            value = format(parts[int(field)], spec or "")
            if value and _CJK.match(value[:1]) and literal.endswith(" ") and _CJK.search(literal[-2:-1]):
                out[-1] = literal[:-1]
            out.append(value)
    return "".join(out)


SEPARATORS = {"; ": "；", " = ": " = ", " + ": " + ", ", ": "，"}  # a listing the checker joined: its items apart


def _by_parts(message: str) -> str:
    """A message no template matches as a whole, translated by its parts: a final full stop, then the items of
    a listing ("A: 1 ms, B: 2 ms"), each looked up on its own; message itself when no part changes."""
    if message.endswith(".") and len(message) > 1:
        head = tr(message[:-1])
        if head != message[:-1]:
            return head + "。"
    for sep, own in SEPARATORS.items():
        if sep in message:
            parts = message.split(sep)
            done = [tr(part) for part in parts]
            if done != parts:
                return own.join(done)
    return message


_TOKEN = re.compile(r"[\u2e80-\u9fff\uff00-\uffef\u3000-\u303f]|[^\s\u2e80-\u9fff\uff00-\uffef\u3000-\u303f]+|\s+")


def fill(line: str, columns: int) -> list[str]:
    """line broken into lines of at most `columns` columns, between words or between Chinese characters (never
    inside a word or a number; a full-width mark never opens a line)."""
    out, cur = [], ""
    for tok in _TOKEN.findall(line):
        if cur and width(cur.rstrip() + tok) > columns and not tok.isspace() and not (
                len(tok) == 1 and tok in "，。；：、）！？"):
            out.append(cur.rstrip())
            cur = ""
        if not (tok.isspace() and not cur):
            cur += tok
    return out + [cur.rstrip()] if cur.strip() else out


# ----- what the ui draws: a figure's texts, a widget's captions

CJK_FONTS = ("Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "WenQuanYi Zen Hei", "WenQuanYi Micro Hei",
             "SimHei", "Microsoft YaHei", "PingFang SC", "Heiti SC")


def cjk_font() -> str | None:
    """The first font matplotlib has that draws Chinese (CJK_FONTS' order), or None: then figures keep their
    English labels, which read better than boxes (Debian: apt-get install fonts-noto-cjk)."""
    from matplotlib import font_manager

    have = {f.name for f in font_manager.fontManager.ttflist}
    return next((name for name in CJK_FONTS if name in have), None)


def localize(thing):
    """thing (a matplotlib Figure, Axes or list of them, an ipywidgets widget) with its texts in the current
    language: a figure's titles, axis labels, legends and annotations (when a font draws them: cjk_font), a
    widget's and its children's captions (description). English: thing untouched. -> thing."""
    if language() is None:
        return thing
    figure = getattr(thing, "figure", None) if not hasattr(thing, "savefig") else thing
    if figure is None and isinstance(thing, (list, tuple)):
        for x in thing:
            localize(x)
        return thing
    if figure is not None and hasattr(figure, "findobj"):
        font = cjk_font()
        from matplotlib.text import Text

        for text in figure.findobj(Text) if font else []:
            s = text.get_text()
            new = tr(s)
            if new != s:
                text.set_text(new)
            if new != s or _CJK.search(new):  # translated here, or already (a label tr(word, context) gave)
                text.set_fontfamily([font, "DejaVu Sans"])
        return thing
    description = getattr(thing, "description", None)
    if isinstance(description, str) and description:
        thing.description = tr(description)
    if type(thing).__name__ in ("HTML", "HTMLMath", "Label") and hasattr(thing, "observe"):
        _html(thing)  # a read-out its widget rewrites on every change: translated each time
        thing.observe(lambda change: _html(change["owner"]), names="value")
    for child in getattr(thing, "children", ()) or ():
        localize(child)
    return thing


_SPACE = " \u00a0"


def translate_html(value: str) -> str:
    """HTML with the text between its tags translated (tr), entities and the spaces around each text kept."""
    import html

    def one(m: re.Match) -> str:
        text = html.unescape(m.group(1))
        core = text.strip(_SPACE)
        new = tr(core) if core else core
        if new == core:
            return m.group(0)
        lead, trail = text[:len(text) - len(text.lstrip(_SPACE))], text[len(text.rstrip(_SPACE)):]
        return ">" + html.escape(lead + new + trail, quote=False).replace("\u00a0", "&nbsp;") + "<"

    return re.sub(r">([^<]+)<", one, f">{value}<")[1:-1]


def _html(widget) -> None:
    """widget.value (HTML) translated in place (translate_html)."""
    value = widget.value
    if isinstance(value, str):
        new = translate_html(value)
        if new != value:
            widget.value = new


def speaks(fn):
    """A ui function whose result (figure, axes, widget) is shown in the current language (localize)."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return localize(fn(*args, **kwargs))

    return wrapper


RECORD = "COMMLIB_RECORD"  # a folder: what this process shows is written there (commlib.ui.shown)
_recording = {"on": bool(os.environ.get(RECORD)), "depth": 0, "seen": set()}


def record(kind: str, text: str, said: str | None = None) -> None:
    """Write {kind, text[, said]} once per process to COMMLIB_RECORD/<pid>.jsonl (kinds: tr, and commlib.ui.shown's
    font, drawn, widget, hint); nothing without COMMLIB_RECORD."""
    folder, key = os.environ.get(RECORD), (kind, text, said)
    if not folder or not isinstance(text, str) or not text.strip() or key in _recording["seen"]:
        return
    _recording["seen"].add(key)
    import json

    line = {"kind": kind, "text": text, **({"said": said} if said is not None else {})}
    try:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, f"{os.getpid()}.jsonl"), "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    except OSError:  # a record is a test's aid: a folder that cannot be written never breaks a chapter
        pass


if os.environ.get(ENV) not in ENGLISH:  # a rank or a command started by a notebook that set its language
    try:
        set_language(os.environ[ENV])
    except ValueError:
        _state.update(lang=None, table=None, templates=[])
