"""The editions in other languages, as the book and the notebooks both need them: which languages have catalogs,
where they live, and each edition's preface. book/build.py (staging) and book/i18n.py (catalogs, notebooks) import
this module; neither imports the other's half of the work at import time."""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LOCALES = ROOT / "locales"
LANGS = ("zh_CN",)


def check_lang(lang: str) -> str:
    if lang not in LANGS:
        raise ValueError(f"lang: {lang!r} has no catalogs; choose one of {', '.join(LANGS)}")
    return lang


def preface(lang: str, locales: Path = LOCALES) -> str:
    """The edition's own note to its reader (locales/<lang>/preface.md): what is translated and what is not."""
    return (locales / check_lang(lang) / "preface.md").read_text(encoding="utf-8").strip()


def with_preface(markdown: str, lang: str) -> str:
    """markdown with the preface after its first heading line."""
    head, _, rest = markdown.partition("\n")
    return f"{head}\n\n{preface(lang)}\n{rest}"


def with_preface_cell(nb: dict, lang: str) -> dict:
    """The notebook with the preface as a markdown cell after its first cell (the chapter's title)."""
    out = dict(nb)
    cell = {"cell_type": "markdown", "id": f"preface-{lang}", "metadata": {},
            "source": preface(lang).splitlines(keepends=True)}
    out["cells"] = nb["cells"][:1] + [cell] + nb["cells"][1:]
    return out


def book_catalogs(lang: str, locales: Path = LOCALES) -> list[Path]:
    """The book's own catalogs (index.po, notebooks/NN_*.po): not commlib's (LC_MESSAGES/commlib/), which the
    package reads at run time."""
    base = locales / check_lang(lang) / "LC_MESSAGES"
    return sorted(p for p in base.rglob("*.po") if p.relative_to(base).parts[0] != "commlib")


# ----- the notebooks in the edition's language: commlib speaks it (commlib.set_language); a run in it by
# `book/i18n.py notebooks --execute` is stored in locales/<lang>/outputs/ (book/outputs.py), which the edition's
# notebooks and book show

def language_cell(lang: str) -> dict:
    """The code cell that opens an edition's notebook: commlib's verdicts, captions and labels in lang."""
    return {"cell_type": "code", "execution_count": None, "id": f"language-{check_lang(lang)}", "metadata": {},
            "outputs": [], "source": ["import commlib\n", f"commlib.set_language({lang!r})"]}


def with_language_cell(nb: dict, lang: str) -> dict:
    """The notebook with language_cell before its first code cell (after the title and any preface)."""
    out = dict(nb)
    cells = list(nb["cells"])
    first = next((i for i, c in enumerate(cells) if c["cell_type"] == "code"), len(cells))
    out["cells"] = cells[:first] + [language_cell(lang)] + cells[first:]
    return out


def code_digest(nb: dict) -> str:
    """A digest of the notebook's code (the sources of its code cells, the edition's language cell left out): an
    edition's run stands for the English notebook only while their code is the same."""
    import hashlib

    code = [c["source"] if isinstance(c["source"], str) else "".join(c["source"]) for c in nb["cells"]
            if c["cell_type"] == "code" and not c.get("id", "").startswith("language-")]
    return hashlib.sha256("\0".join(code).encode()).hexdigest()[:16]


_VERDICT = re.compile(r"^(Correct\. |Not yet\. )(.*(?:\n(?!Correct\. |Not yet\. ).*)*)", re.MULTILINE)


def _drawn_in_language(output: dict) -> bool:
    """An output whose stored English a run in another language cannot reproduce from it: a widget (its repr
    holds its captions, cut short) or an animation's player (its captions)."""
    data = output.get("data", {})
    html = data.get("text/html", "")
    return "application/vnd.jupyter.widget-view+json" in data or "commlib-animation" in "".join(html)


# the first line of diagnose's and whatif's text reports (commlib/profiling/report/): printed in lang by a run in lang
_REPORT = re.compile(r"^# \d+ rank\(s\) of an? \d+-rank \S+ job[;,]", re.MULTILINE)


def _reported(output: dict) -> bool:
    """A printed diagnose or whatif report: a run in another language prints it in that language, which its stored
    English cannot be rendered into line by line (its sentences wrap anew)."""
    text = output.get("text", "") if output.get("output_type") == "stream" else ""
    return bool(_REPORT.search("".join(text) if isinstance(text, list) else text))


def with_verdicts_in(nb: dict, lang: str) -> dict:
    """nb with the checkers' verdicts among its stored outputs as commlib prints them in lang (each verdict
    rendered again, from its English message, by commlib's own Verdict and catalogs), and its saved widgets'
    captions and read-outs in lang: what a run in lang shows there, before any run. Other outputs (figures
    included) stay as they are; a cell that shows a widget or an animation, or prints a diagnose or whatif report,
    is tagged nbval-ignore-output (its stored repr or report is English), so that nbval of these notebooks compares
    every other output with the English edition's."""
    from commlib.exercises.answers import Verdict
    from commlib.ui import language

    def again(m: re.Match) -> str:
        trail = m.group(2)[len(m.group(2).rstrip("\n")):]
        return repr(Verdict(m.group(1) == "Correct. ", m.group(2).rstrip("\n").replace("\n", " "))) + trail

    before = language.language()
    language.set_language(lang)
    try:
        cells = []
        for cell in nb["cells"]:
            outs = []
            for o in cell.get("outputs", []) if cell["cell_type"] == "code" else []:
                o = json.loads(json.dumps(o))
                if o.get("output_type") == "stream":
                    text = "".join(o["text"]) if isinstance(o["text"], list) else o["text"]
                    o["text"] = _VERDICT.sub(again, text).splitlines(keepends=True)
                elif o.get("output_type") == "execute_result" and "text/plain" in o.get("data", {}):
                    text = o["data"]["text/plain"]
                    text = "".join(text) if isinstance(text, list) else text
                    o["data"]["text/plain"] = _VERDICT.sub(again, text).splitlines(keepends=True)
                outs.append(o)
            if cell["cell_type"] == "code" and any(_drawn_in_language(o) or _reported(o) for o in outs):
                tags = cell.get("metadata", {}).get("tags", [])  # nbval: a widget's repr, a player's captions, a report
                cell = dict(cell, metadata={**cell.get("metadata", {}), "tags": [*tags, "nbval-ignore-output"]}
                            ) if "nbval-ignore-output" not in tags else cell
            cells.append(dict(cell, outputs=outs) if cell["cell_type"] == "code" else cell)
        metadata = json.loads(json.dumps(nb.get("metadata", {})))
        state = metadata.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        for model in state.values():  # the widgets as the book shows them: their captions and read-outs
            s = model.get("state", {})
            if isinstance(s.get("description"), str) and s["description"]:
                s["description"] = language.tr(s["description"])
            if model.get("model_name") in ("HTMLModel", "HTMLMathModel", "LabelModel") and isinstance(s.get("value"), str):
                s["value"] = language.translate_html(s["value"])
    finally:
        language.set_language(before)
    return dict(nb, cells=cells, metadata=metadata)
