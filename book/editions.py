"""The editions in other languages, as the book and the notebooks both need them: which languages have catalogs,
where they live, and each edition's preface. book/build.py (staging) and book/i18n.py (catalogs, notebooks) import
this module; neither imports the other's half of the work at import time."""

from __future__ import annotations

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


# ----- the notebooks in the edition's language: commlib speaks it (commlib.set_language), run by the learner or
# by `book/i18n.py notebooks --execute`, whose outputs the edition's book shows

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


def executed_outputs(nb: dict, run: Path, lang: str) -> dict:
    """nb (the English notebook, the language cell added) with the outputs and widget state of run, the edition's
    notebook as executed in lang, cell by cell (their ids), when run holds the same code and was executed; else nb
    as it is. A notebook run in lang prints its verdicts and draws its captions in lang."""
    import json

    try:
        done = json.loads(run.read_text(encoding="utf-8")) if run.is_file() and run.stat().st_size < 64 * 2**20 else None
    except ValueError:
        done = None
    code = [c for c in (done or {}).get("cells", []) if c.get("cell_type") == "code"]
    if (done is None or done.get("metadata", {}).get("commlib", {}).get("lang") != lang
            or code_digest(done) != code_digest(nb) or not all(c.get("execution_count") for c in code)):
        return nb
    by_id = {c.get("id"): c for c in code}
    out = dict(nb)
    out["cells"] = [dict(c, outputs=by_id[c["id"]]["outputs"], execution_count=by_id[c["id"]]["execution_count"])
                    if c["cell_type"] == "code" and c.get("id") in by_id else c for c in nb["cells"]]
    widgets = done.get("metadata", {}).get("widgets")
    out["metadata"] = {**nb.get("metadata", {}), **({"widgets": widgets} if widgets else {})}
    return out
