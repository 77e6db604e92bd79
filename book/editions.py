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
