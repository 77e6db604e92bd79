"""An edition's own outputs: what its notebooks show after a run in its language (figures, printed text, verdicts,
reports, widgets' state), committed beside its catalogs, one file per chapter, its figures as PNG files:

    locales/<lang>/outputs/NN_name.json       {"from", "code", "font", "messages", "drawn", "hints", "cells", "widgets"}
    locales/<lang>/outputs/NN_name/<sha256[:16]>.png

"code" is the digest of the chapter's code cells (editions.code_digest) the run executed; "font" the font its
figures drew Chinese with; "messages" is every
message commlib looked up in its catalogs during the run, with what it gave ({English: shown}); "drawn" every text
its figures drew (ticks, legends, titles); "hints" what each checker the chapter calls
says to wrong answers (commlib.ui.shown); "cells" each code cell's outputs and execution count, by cell id, an
image's PNG (an output's, a widget's, an animation's frame) named "@NN_name/<hash>.png"; "widgets" the widgets'
saved state (the book shows it).

`python3 course.py notebooks --lang zh_CN --execute` (book/i18n.py) runs the chapters and writes these files.
They are stale when the chapter's code changed or a message the run used translates differently now (stale()),
and tests/test_zh_outputs.py fails then. The edition's notebooks and book show them (with_outputs) in place of the
English outputs; nbval of the edition's notebooks compares a fresh run in the edition's language with them.
"""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

from editions import LOCALES, check_lang, code_digest

PNG = "image/png"
RECORD = "COMMLIB_RECORD"  # commlib.ui.language.RECORD: where a run writes what it shows


def folder(lang: str, locales: Path = LOCALES) -> Path:
    return locales / check_lang(lang) / "outputs"


def read_record(record: Path) -> dict:
    """The record a run in the edition's language wrote (commlib.ui.language.record: one JSONL file per process)
    -> {"messages": {English: shown}, "drawn": [texts], "widget": [texts], "hints": [[checker, verdict]], "font": the
    font the kernel had for Chinese ("none": its figures kept English labels; None: nothing recorded)}."""
    messages, drawn, widget, hints, fonts = {}, set(), set(), set(), set()
    for path in sorted(Path(record).glob("*.jsonl")) if Path(record).is_dir() else []:
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                item = json.loads(line)
            except ValueError:  # a line a killed process left half written
                continue
            if item.get("kind") == "tr":
                messages[item["text"]] = item.get("said", item["text"])
            elif item.get("kind") == "drawn":
                drawn.add(item["text"])
            elif item.get("kind") == "widget":
                widget.add(item["text"])
            elif item.get("kind") == "hint":
                hints.add((item.get("said") or "", item["text"]))
            elif item.get("kind") == "font":
                fonts.add(item["text"])
    return {"messages": dict(sorted(messages.items())), "drawn": sorted(drawn), "widget": sorted(widget),
            "hints": [list(h) for h in sorted(hints)], "font": ", ".join(sorted(fonts)) or None}


_URI = re.compile(r"data:image/png;base64,([A-Za-z0-9+/=]+)")
_REF = re.compile(r"data:image/png;base64,@([\w./-]+\.png)")


def _pngs_apart(value, chapter: str, pngs: Path):
    """value (outputs, widget state: any JSON) with every PNG in it written to pngs/<its hash>.png and named
    there instead: an output's or a widget's "image/png" as "@NN_name/<hash>.png", a data URI inside HTML (an
    animation's frames) as "data:image/png;base64,@NN_name/<hash>.png"."""
    def keep(b64: str) -> str:
        data = base64.b64decode(b64)
        name = f"{hashlib.sha256(data).hexdigest()[:16]}.png"
        pngs.mkdir(parents=True, exist_ok=True)
        if not (pngs / name).exists():
            (pngs / name).write_bytes(data)
        return f"@{chapter}/{name}"

    if isinstance(value, dict):
        return {k: keep(v) if k == PNG and isinstance(v, str) and not v.startswith("@") else
                _pngs_apart(v, chapter, pngs) for k, v in value.items()}
    if isinstance(value, list):
        return [_pngs_apart(v, chapter, pngs) for v in value]
    if isinstance(value, str) and "data:image/png;base64," in value:
        return _URI.sub(lambda m: "data:image/png;base64," + keep(m.group(1)), value)
    return value


def _pngs_back(value, base: Path):
    """_pngs_apart undone: each named PNG file read back as base64."""
    read = lambda ref: base64.b64encode((base / ref).read_bytes()).decode("ascii")  # noqa: E731
    if isinstance(value, dict):
        return {k: read(v[1:]) if k == PNG and isinstance(v, str) and v.startswith("@") else _pngs_back(v, base)
                for k, v in value.items()}
    if isinstance(value, list):
        return [_pngs_back(v, base) for v in value]
    if isinstance(value, str) and "data:image/png;base64,@" in value:
        return _REF.sub(lambda m: "data:image/png;base64," + read(m.group(1)), value)
    return value


def png_files(value) -> set[str]:
    """The PNG files (NN_name/<hash>.png) a stored chapter names."""
    text = json.dumps(value, ensure_ascii=False)
    return set(re.findall(r'"@([\w./-]+\.png)"', text)) | set(_REF.findall(text))


def save(lang: str, chapter: str, nb: dict, record: Path, locales: Path = LOCALES) -> Path:
    """Write the outputs of nb (the edition's notebook of chapter NN_name, executed in lang) and its run's record
    into locales/<lang>/outputs/; its old PNG files go. -> the JSON file."""
    import shutil

    base = folder(lang, locales)
    pngs = base / chapter
    shutil.rmtree(pngs, ignore_errors=True)
    cells = {c["id"]: {"execution_count": c.get("execution_count"), "outputs": c.get("outputs", [])}
             for c in nb["cells"] if c["cell_type"] == "code"}
    ran = read_record(record)
    stored = {"from": f"notebooks/{chapter}.ipynb", "code": code_digest(nb), "font": ran["font"],
              "messages": ran["messages"],
              "drawn": ran["drawn"], "hints": ran["hints"], "cells": cells,
              "widgets": nb.get("metadata", {}).get("widgets", {})}
    stored = _pngs_apart(stored, chapter, pngs)
    path = base / f"{chapter}.json"
    base.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(stored, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return path


def load(lang: str, chapter: str, locales: Path = LOCALES) -> dict | None:
    """The stored outputs of chapter NN_name in lang, their PNG files read back (base64, as a notebook holds
    them); None where there are none."""
    base = folder(lang, locales)
    path = base / f"{chapter}.json"
    if not path.is_file():
        return None
    return _pngs_back(json.loads(path.read_text(encoding="utf-8")), base)


def with_outputs(nb: dict, chapter: str, lang: str, locales: Path = LOCALES) -> dict | None:
    """nb (the English notebook, the edition's language cell added) with the edition's stored outputs and widget
    state in place of its own, cell by cell; None where none are stored for this code (then the caller shows the
    English outputs, verdicts rendered in lang: editions.with_verdicts_in)."""
    stored = load(lang, chapter, locales)
    if stored is None or stored["code"] != code_digest(nb):
        return None
    out = dict(nb)
    out["cells"] = [dict(c, outputs=stored["cells"][c["id"]]["outputs"],
                         execution_count=stored["cells"][c["id"]]["execution_count"])
                    if c["cell_type"] == "code" and c.get("id") in stored["cells"] else c for c in nb["cells"]]
    widgets = stored.get("widgets")
    metadata = {k: v for k, v in nb.get("metadata", {}).items() if k != "widgets"}
    out["metadata"] = {**metadata, **({"widgets": widgets} if widgets else {})}
    return out


def stale(lang: str, chapter: str, nb: dict, locales: Path = LOCALES) -> list[str]:
    """Why the stored outputs of chapter NN_name no longer stand for a run of nb (the English notebook, the
    language cell added) with today's catalogs -> one line per reason ([] where they are current): none stored,
    other code, a message the run used that the catalogs now translate otherwise."""
    from commlib.ui import language

    path = folder(lang, locales) / f"{chapter}.json"
    if not path.is_file():
        return [f"{chapter}: no stored outputs ({path.relative_to(locales.parent)})"]
    stored = json.loads(path.read_text(encoding="utf-8"))
    why = []
    if stored["code"] != code_digest(nb):
        why.append(f"{chapter}: its code changed since the run")
    missing = [c["id"] for c in nb["cells"] if c["cell_type"] == "code" and c["id"] not in stored["cells"]]
    if missing:
        why.append(f"{chapter}: cells without stored outputs: {missing[:5]}")
    before = language.language()
    language.set_language(lang)
    try:
        for message, shown in stored["messages"].items():
            context, _, word = message.rpartition(language.CONTEXT)  # "step time\x04step": tr(word, context)
            now = language.tr(word, context) if context else language.tr(message)
            if now != shown:
                at = next((i for i, (a, b) in enumerate(zip(now, shown)) if a != b), min(len(now), len(shown)))
                cut = lambda t: ("…" if at > 30 else "") + t[max(at - 30, 0):at + 40]  # noqa: E731
                why.append(f"{chapter}: {message[:60]!r} now reads {cut(now)!r}, the run showed {cut(shown)!r}")
    finally:
        language.set_language(before)
    base = folder(lang, locales)
    why += [f"{chapter}: {ref} is missing" for ref in sorted(png_files(stored)) if not (base / ref).is_file()]
    return why
