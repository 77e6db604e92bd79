"""Editions in other languages: gettext catalogs of the chapters' prose, by Sphinx's own workflow, and the
notebooks translated from them.

    python book/i18n.py extract   [--lang zh_CN]   # build/gettext/*.pot from the chapters; locales/<lang>/ updated
    python book/i18n.py check     [--lang zh_CN] [--only 03 ...]   # extracts afresh, then what the tests hold
    python book/i18n.py notebooks [--lang zh_CN] [--out DIR] [--force]     # build/notebooks-<lang>/*.ipynb
    python book/i18n.py notebooks --execute [--only 03 ...]   # run them in <lang>: locales/<lang>/outputs/

`extract` stages the book's sources as book/build.py does (the notebooks as they are in notebooks/), runs
`sphinx-build -b gettext` (one catalog per chapter: gettext_compact = False in book/conf.py), and merges the
templates into locales/<lang>/LC_MESSAGES/ with sphinx-intl: a changed English message becomes fuzzy, a new
one untranslated, and `check` fails until a translator has seen it.

A message is what Sphinx extracts from MyST: a paragraph, list item, heading or table cell as written in
Markdown, its lines joined by spaces. `notebooks` parses each markdown cell with the same MyST parser, looks
each block up in the chapter's catalog and writes the translation in its place; code cells are copied unchanged,
after one that sets commlib's language (commlib.set_language: its verdicts, captions and plot labels come from
locales/<lang>/LC_MESSAGES/commlib/), and their outputs those of a run in that language, committed in
locales/<lang>/outputs/ (book/outputs.py; a chapter without current ones shows the English outputs, its verdicts
rendered in that language: editions.with_verdicts_in). nbval checks them (pytest build/notebooks-<lang>): a run in
that language must print what the edition's run printed. --execute runs the chapters afresh in that language
(build/<lang>-run/, recording what they show: commlib.ui.shown) and writes their outputs into
locales/<lang>/outputs/; the edition's book shows them too.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

if str(Path(__file__).parent) not in sys.path:
    sys.path.insert(0, str(Path(__file__).parent))
import editions  # noqa: E402
import outputs  # noqa: E402
from editions import (LANGS, LOCALES, ROOT, book_catalogs, check_lang, preface, with_language_cell,  # noqa: E402,F401
                      with_preface, with_preface_cell)

POT = ROOT / "build" / "gettext"


def extract(pot: Path = POT, work: Path = ROOT / "build" / "gettext-src") -> list[Path]:
    """The message templates (pot/index.pot, pot/notebooks/NN_*.pot) of the chapters as they are in notebooks/."""
    import shutil

    import build  # book/build.py, beside this file: the same staging as the book

    shutil.rmtree(pot, ignore_errors=True)  # a renamed chapter leaves no template behind
    build.stage(work, solutions=True, working_tree=True)
    cmd = [sys.executable, "-m", "sphinx", "-b", "gettext", "-c", str(ROOT / "book"), "-d",
           str(work.parent / "gettext-doctrees"), "-q", "-T", str(work), str(pot)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx-build -b gettext failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    return sorted(pot.rglob("*.pot"))


def update(lang: str, pot: Path = POT, locales: Path = LOCALES) -> None:
    """Merge the templates into locales/<lang>/LC_MESSAGES/*.po (sphinx-intl update): new messages untranslated,
    changed ones fuzzy, gone ones dropped."""
    cmd = [sys.executable, "-m", "sphinx_intl", "update", "-p", str(pot), "-d", str(locales), "-l", check_lang(lang),
           "-w", "0"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise RuntimeError(f"sphinx-intl update failed ({proc.returncode}):\n{proc.stderr[-3000:]}")
    from babel.messages.pofile import write_po

    for po in book_catalogs(lang, locales):  # messages gone from the English go too
        catalog = read_catalog(po)
        if catalog.obsolete:
            with open(po, "wb") as f:
                write_po(f, catalog, width=0, ignore_obsolete=True)


def catalog_path(lang: str, domain: str, locales: Path = LOCALES) -> Path:
    """domain: "index" or "notebooks/NN_name" (the document's name, as Sphinx names its catalog)."""
    return locales / check_lang(lang) / "LC_MESSAGES" / f"{domain}.po"


def read_catalog(path: Path):
    """A babel Catalog of the .po file (bounded: a catalog is text of a few hundred KiB)."""
    from babel.messages.pofile import read_po

    if path.stat().st_size > 8 * 2**20:
        raise ValueError(f"{path}: {path.stat().st_size} bytes is not a catalog")
    with open(path, "rb") as f:
        return read_po(f, abort_invalid=True)


def translations(path: Path) -> dict[str, str]:
    """msgid -> msgstr of the catalog's translated, non-fuzzy messages."""
    return {m.id: m.string for m in read_catalog(path) if m.id and m.string and not m.fuzzy}


# ----- the notebooks: each markdown block replaced by its translation -----

def markdown_parser():
    from markdown_it.renderer import RendererHTML
    from myst_parser.config.main import MdParserConfig
    from myst_parser.parsers.mdit import create_md_parser

    return create_md_parser(MdParserConfig(enable_extensions={"dollarmath", "amsmath"}), RendererHTML)


def message(text: str) -> str:
    """The message Sphinx extracts from a block's Markdown source (sphinx.util.nodes._clean_extracted_message)."""
    text = re.sub(r"[ \t]*\\[ \t]*$", "", text, flags=re.MULTILINE)
    return text.replace("\n", " ").strip()


def translate_markdown(source: str, table: dict[str, str], missing: list[str], md=None) -> str:
    """source with every block (paragraph, list item, heading, table cell) that the catalog translates replaced
    by its translation, on one line, behind the block's own prefix (list marker, "> ", "## ", indent). A block
    the catalog lacks stays English and is appended to missing."""
    md = md or markdown_parser()
    lines = source.split("\n")
    edits: dict[int, tuple[int, list[str]]] = {}  # first line -> (end line, new lines)
    rows: dict[int, list[str]] = {}  # a table row's line -> its cells, rebuilt cell by cell, empty ones too
    tokens = md.parse(source)
    for i, tok in enumerate(tokens):
        if tok.type == "math_block" and tok.map and lines[tok.map[0]].lstrip().startswith("$$"):
            new = table.get(tok.content.strip())  # display math (Sphinx keeps its lines): \text{} may be translated
            if new is not None:
                at = lines[tok.map[0]].index("$$")
                edits[tok.map[0]] = (tok.map[1], f"{lines[tok.map[0]][:at]}$${new}$$".split("\n"))
            continue
        if tok.type != "inline" or tok.map is None:
            continue
        start, end = tok.map
        msg = message(tok.content)
        new = table.get(msg) if msg else msg
        if new is None:
            missing.append(msg)
        if tokens[i - 1].type in ("th_open", "td_open"):
            rows.setdefault(start, []).append(msg if new is None else new)
            continue
        if not new:
            continue
        first = tok.content.split("\n", 1)[0].strip()
        at = lines[start].find(first)
        prefix = lines[start][:at] if at >= 0 else lines[start][:len(lines[start]) - len(lines[start].lstrip())]
        edits[start] = (end, [prefix + new])
    for start, cells in rows.items():
        edits[start] = (start + 1, ["| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"])
    for start in sorted(edits, reverse=True):
        end, new = edits[start]
        lines[start:end] = new
    return "\n".join(lines)


def rebase_links(text: str, src_dir: Path, out_dir: Path) -> str:
    """Relative link targets that leave src_dir (../assets/x.svg) made relative to out_dir instead."""
    def fix(m: re.Match) -> str:
        target = (src_dir / m.group(2)).resolve()
        return f"{m.group(1)}{Path(os.path.relpath(target, out_dir.resolve())).as_posix()}"

    return re.sub(r"(\]\()(\.\./[^)\s]+)", fix, text)


def localize_images(text: str, src_dir: Path, lang: str) -> str:
    """Images that have the edition's own version beside them (map.svg -> map.zh_CN.svg) shown in that version,
    as Sphinx does in the book (figure_language_filename's default, "{root}.{language}{ext}")."""
    def fix(m: re.Match) -> str:
        own = localized(m.group(2), lang)
        return f"{m.group(1)}{own}" if "://" not in own and (src_dir / own).is_file() else m.group(0)

    return re.sub(r"(!\[[^\]]*\]\()([^)\s]+)", fix, text)


def translate_notebook(nb: dict, table: dict[str, str], src_dir: Path, out_dir: Path, lang: str | None = None
                       ) -> tuple[dict, list[str]]:
    """(the notebook with its markdown cells translated, its images localized and its links rebased, the messages
    the catalog lacks)."""
    md, missing = markdown_parser(), []
    out = json.loads(json.dumps(nb))
    for cell in out["cells"]:
        if cell["cell_type"] == "markdown":
            text = translate_markdown("".join(cell["source"]), table, missing, md)
            text = rebase_links(localize_images(text, src_dir, lang) if lang else text, src_dir, out_dir)
            cell["source"] = text.splitlines(keepends=True)
    return out, missing


def write_notebooks(lang: str, out: Path | None = None, src: Path = ROOT / "notebooks", locales: Path = LOCALES,
                    force: bool = False) -> tuple[list[Path], dict[str, list[str]], list[Path]]:
    """build/notebooks-<lang>/NN_*.ipynb from notebooks/ and the catalogs, each opening with the cell that sets
    commlib's language; -> (paths written, {chapter: blocks the catalog lacks}, paths kept). Their code cells hold
    the outputs of the edition's run (locales/<lang>/outputs/) where it ran this code, else the English outputs
    with their verdicts in lang. A notebook the learner has changed since it was written (run, edited: its bytes
    differ from those recorded in .written.json) is kept, unless force."""
    import hashlib

    out = Path(out or ROOT / "build" / f"notebooks-{check_lang(lang)}")
    out.mkdir(parents=True, exist_ok=True)
    record = out / ".written.json"
    try:
        before = json.loads(record.read_text(encoding="utf-8")) if record.is_file() else {}
    except ValueError:
        before = {}
    written, lacking, kept_ = [], {}, []
    for i, path in enumerate(sorted(src.glob("[0-9]*.ipynb"))):
        target = out / path.name
        if target.exists() and not force:
            sha = hashlib.sha256(target.read_bytes()).hexdigest()
            if before.get(path.name) != sha:
                kept_.append(target)
                continue
        po = catalog_path(lang, f"notebooks/{path.stem}", locales)
        table = translations(po) if po.exists() else {}
        nb, missing = translate_notebook(json.loads(path.read_text(encoding="utf-8")), table, src, out, lang)
        nb = with_language_cell(nb, lang)  # commlib speaks lang: verdicts, captions, plot labels
        ran = outputs.with_outputs(nb, path.stem, lang, locales)  # the outputs of the edition's own run
        nb = ran if ran is not None else editions.with_verdicts_in(nb, lang)  # else the English, verdicts in lang
        nb = with_preface_cell(nb, lang) if i == 0 else nb
        nb.setdefault("metadata", {})["commlib"] = {"lang": lang, "from": f"notebooks/{path.name}"}
        data = (json.dumps(nb, indent=1, ensure_ascii=False) + "\n").encode("utf-8")
        target.write_bytes(data)
        before[path.name] = hashlib.sha256(data).hexdigest()
        written.append(target)
        if missing:
            lacking[path.stem] = missing
    record.write_text(json.dumps(before, indent=1), encoding="utf-8")
    return written, lacking, kept_


def execute(lang: str, only: tuple[str, ...] = (), work: Path = ROOT / "build", timeout: int = 900,
            say=print) -> dict[str, float]:
    """Run the chapters (those whose names start with one of only; all without) top to bottom in lang, each in a
    fresh kernel (tools/run_notebooks.py) in work/<lang>-run/, recording what they show into work/<lang>-record/
    (COMMLIB_RECORD), and store their outputs in locales/<lang>/outputs/ (book/outputs.py). -> {chapter: seconds}.
    RuntimeError naming the chapter that failed (the chapters before it are stored)."""
    import shutil

    from commlib.ui import shown
    from commlib.ui.language import cjk_font

    if lang.startswith(("zh", "ja", "ko")) and cjk_font() is None:  # its figures would keep their English labels
        raise RuntimeError(f"no font here draws {lang}'s characters, so the run's figures would stay English: install "
                           "one (Debian: apt-get install fonts-noto-cjk) and remove matplotlib's font cache "
                           "(~/.cache/matplotlib/fontlist-*.json)")
    run, records = Path(work) / f"{check_lang(lang)}-run", Path(work) / f"{lang}-record"  # beside notebooks-<lang>
    for folder in (run, records):
        shutil.rmtree(folder, ignore_errors=True)
    paths, _, _ = write_notebooks(lang, run, force=True)
    took = {}
    for path in paths:
        if only and not any(path.stem.startswith(o) for o in only):
            continue
        record = records / path.stem  # the kernel records what it shows there (commlib.ui.shown)
        env = {**os.environ, outputs.RECORD: str(record), "IPYTHONDIR": shown.ipython_dir(record)}
        cmd = [sys.executable, str(ROOT / "tools" / "run_notebooks.py"), str(path)]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=ROOT, env=env)
        if proc.returncode != 0:
            raise RuntimeError(f"{path.name} failed in its edition's run:\n{proc.stderr[-3000:]}")
        took[path.stem] = float(proc.stdout.rsplit(":", 1)[-1].split()[0])
        outputs.save(lang, path.stem, json.loads(path.read_text(encoding="utf-8")), record)
        say(f"i18n: {path.stem} run in {lang} in {took[path.stem]:.1f} s; its outputs stored", flush=True)
    return took


# ----- the checks a translation must pass -----

_CODE = re.compile(r"``?[^`]+``?")
_MATH = re.compile(r"\$\$?[^$]+\$\$?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
_NUMBER = re.compile(r"(?<![\w.])\d+(?:[.,]\d+)*(?![\w])")


def localized(target: str, lang: str) -> str:
    """The edition's own version of a linked file: ../assets/map.svg -> ../assets/map.zh_CN.svg."""
    path, dot, ext = target.rpartition(".")
    return f"{path}.{lang}.{ext}" if dot and "/" not in ext else target


def kept(msgid: str, msgstr: str, lang: str | None = None) -> list[str]:
    """What a translation dropped or changed of what it must keep exactly: code spans, math, link targets (or the
    edition's localized file, assets/x.<lang>.svg), numbers (outside code and math). -> one line per problem."""
    problems = []
    for what, pattern in (("code", _CODE), ("math", _MATH), ("link", LINK)):
        for item in pattern.findall(msgid):
            if item not in msgstr and not (what == "link" and lang and localized(item, lang) in msgstr):
                problems.append(f"{what} {item!r} is missing")
    plain_en = _MATH.sub(" ", _CODE.sub(" ", msgid))
    plain_zh = _MATH.sub(" ", _CODE.sub(" ", msgstr))
    for n in _NUMBER.findall(LINK.sub(" ", plain_en)):
        if not re.search(rf"(?<![\d.,]){re.escape(n)}(?![\d])", plain_zh):
            problems.append(f"number {n} is missing")
    return problems


_MARKUP = ("strong_open", "em_open", "image")  # code, math and links: kept() holds each one


def markup(text: str, md=None) -> dict[str, int]:
    """How many of each inline element (bold, italic, image) the text renders to: a translation must render the
    same ones (CommonMark leaves `**保留：**每个` unbolded: emphasis that closes after full-width
    punctuation needs a space or punctuation after it)."""
    md = md or markdown_parser()
    counts = dict.fromkeys(_MARKUP, 0)
    for tok in md.parseInline(text):
        for child in tok.children or []:
            if child.type in counts:
                counts[child.type] += 1
    return counts


TEXT_LABEL = re.compile(r"\\text\{[^}]*\}")


def math_messages(src: Path = ROOT / "notebooks", md=None) -> set[str]:
    """The messages that are display math ($$...$$ blocks) in the chapters."""
    md, found = md or markdown_parser(), set()
    for path in sorted(src.glob("[0-9]*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                found.update(t.content.strip() for t in md.parse("".join(cell["source"])) if t.type == "math_block")
    return found


def glossary(lang: str, locales: Path = LOCALES) -> tuple[list[str], dict[str, str]]:
    """(names kept in English, {English term: rendering} of the terms marked "must") from glossary.md."""
    text = (locales / check_lang(lang) / "glossary.md").read_text(encoding="utf-8")
    names, terms, section = [], {}, None
    for line in text.splitlines():
        if line.startswith("## "):
            section = line[3:].strip()
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("|") else []
        if not cells or set(cells[0]) <= set("-") or cells[0] in ("name", "English"):
            continue
        if section == "Names kept in English":
            names.append(cells[0])
        elif section == "Terms" and len(cells) >= 3 and cells[2] == "yes":
            terms[cells[0]] = cells[1]
    return names, terms


def check(lang: str, only: tuple[str, ...] = (), pot: Path = POT, locales: Path = LOCALES) -> list[str]:
    """Every message of every template translated, not fuzzy, keeping its code, math, links and numbers, with the
    glossary's names and terms; -> one line per problem (one saying so when extract has not run)."""
    from babel.messages.pofile import read_po

    names, terms = glossary(lang, locales)
    md, problems = markdown_parser(), []
    maths = math_messages(md=md)
    templates = sorted(pot.rglob("*.pot"))
    if not templates:
        return [f"{pot}: no templates; run python book/i18n.py extract"]
    for template in templates:
        domain = template.relative_to(pot).with_suffix("").as_posix()
        if only and not any(Path(domain).name.startswith(o) for o in only):
            continue
        po = catalog_path(lang, domain, locales)
        if not po.exists():
            problems.append(f"{domain}: no catalog {po.relative_to(locales.parent)}")
            continue
        with open(template, "rb") as f:
            ids = [m.id for m in read_po(f) if m.id]
        have = {m.id: m for m in read_catalog(po) if m.id}
        for msgid in ids:
            m = have.get(msgid)
            where = f"{domain}: {msgid[:70]!r}"
            if m is None or not m.string:
                problems.append(f"{where}: untranslated")
                continue
            if m.fuzzy:
                problems.append(f"{where}: fuzzy (the English changed; check the translation, then drop the flag)")
            if msgid in maths:  # display math: the same formula, only its \text{} labels translated
                if TEXT_LABEL.sub("", msgid) != TEXT_LABEL.sub("", m.string):
                    problems.append(f"{where}: the formula changed outside its \\text{{}} labels")
                continue
            for p in kept(msgid, m.string, lang):
                problems.append(f"{where}: {p}")
            en, zh = markup(msgid, md), markup(m.string, md)
            if en != zh:
                diff = ", ".join(f"{k.removesuffix('_open')} {en[k]} -> {zh[k]}" for k in en if en[k] != zh[k])
                problems.append(f"{where}: renders different markup ({diff})")
            prose = LINK.sub("]", _MATH.sub(" ", _CODE.sub(" ", msgid)))  # names and terms outside code
            for name in names:
                if re.search(rf"(?<![\w-]){re.escape(name)}(?![\w-])", prose) and name not in m.string:
                    problems.append(f"{where}: the name {name} is not kept")
            for term, zh in terms.items():
                if re.search(rf"\b{re.escape(term)}", prose, re.IGNORECASE) and zh not in m.string:
                    problems.append(f"{where}: {term!r} is not rendered {zh} (glossary)")
    return problems


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("extract", "check", "notebooks"))
    ap.add_argument("--lang", default="zh_CN", choices=LANGS)
    ap.add_argument("--only", nargs="*", default=(),
                    help="chapters' number prefixes, for check and notebooks --execute (e.g. 03 09)")
    ap.add_argument("--out", type=Path, help="for notebooks: the folder (default build/notebooks-<lang>)")
    ap.add_argument("--force", action="store_true", help="for notebooks: also replace those you ran or edited")
    ap.add_argument("--execute", action="store_true",
                    help="for notebooks: run the chapters in the edition's language and store their outputs in "
                         "locales/<lang>/outputs/ (then write the notebooks with them)")
    args = ap.parse_args(argv)
    if args.command == "extract":
        templates = extract()
        update(args.lang)
        print(f"i18n: {len(templates)} templates in {POT.relative_to(ROOT)}; catalogs in "
              f"{(LOCALES / args.lang).relative_to(ROOT)} updated")
        return 0
    if args.command == "check":  # against templates extracted now: the English may have changed since
        extract()
        problems = check(args.lang, tuple(args.only))
        for p in problems:
            print(p)
        print(f"i18n: {len(problems)} problem(s)" if problems else "i18n: the catalogs are complete")
        return 1 if problems else 0
    if args.execute:
        try:
            took = execute(args.lang, tuple(args.only))
        except (RuntimeError, subprocess.TimeoutExpired) as e:
            print(f"i18n: {e}", file=sys.stderr)
            return 1
        print(f"i18n: {len(took)} chapter(s) run in {args.lang} in {sum(took.values()):.0f} s; their outputs are in "
              f"{outputs.folder(args.lang).relative_to(ROOT)}")
    written, lacking, kept_ = write_notebooks(args.lang, args.out, force=args.force)
    for chapter, missing in lacking.items():
        print(f"i18n: {chapter}: {len(missing)} block(s) not translated yet, left in English")
    if kept_:
        print(f"i18n: kept {len(kept_)} notebook(s) you ran or edited ({', '.join(p.name for p in kept_)}); "
              f"--force replaces them with the current translation")
    folder = (written or kept_)[0].parent if written or kept_ else args.out
    print(f"i18n: {len(written)} notebook(s) written in {folder}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
