"""English left in what the zh_CN edition shows when its chapters run: every figure's drawn texts (ticks, legends,
titles), every printed text and HTML output, every widget's captions and read-outs, and what every checker the
chapters call says to wrong answers (commlib.ui.shown). A text fails, naming its chapter, when it holds an English
word outside code names (`x`, snake_case, camelCase, dotted or with digits), units, acronyms, the glossary's names
kept in English and the allowlist tests/zh_english_allowed.txt. A printed line with no Chinese in it is the
chapter's own measurement line, which stays English (the preface says so), unless it holds a sentence (four English
words in a row).

What it reads: the run that `course.py test --lang zh_CN` made just before (nbval of the zh_CN notebooks, which
records what it shows into COMMLIB_RECORD_RUN: book/nbrecord.py), else the committed run of the edition
(locales/zh_CN/outputs/, written by `course.py notebooks --lang zh_CN --execute`).

    python tests/test_zh_english.py [RUN_FOLDER]   # every English text, one line each, by chapter
    python tests/test_zh_english.py --known        # tests/zh_english_known.txt: the leftovers, from the committed run

tests/zh_english_known.txt lists the English the edition knows it still shows (issue 62's leftovers: sentences the
chapters' own code prints, a few figure and widget texts), each with its numbers as #; the test leaves those out
and fails on any other. Translate one and regenerate the list; it only shrinks.
"""

from __future__ import annotations

import html
import json
import os
import re
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "book")]
LANG = "zh_CN"
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
STORED = ROOT / "locales" / LANG / "outputs"
ALLOWED = Path(__file__).with_name("zh_english_allowed.txt")
CJK = re.compile(r"[\u3400-\u9fff\u3000-\u303f\uff00-\uffef]")
SENTENCE = 4  # English words in a row that make a sentence
WIDGET = "application/vnd.jupyter.widget-view+json"


# ------------------------------------------------------------------ what a text is: English words, or not

def allowlist(path: Path = ALLOWED) -> tuple[set[str], list[str], list[re.Pattern]]:
    """(words, phrases, line patterns) allowed in English: the allowlist's lines (a word, a phrase of several, or
    "re: PATTERN" for a whole line; a word with a capital letter only as written, else in any case) and the
    glossary's names kept in English."""
    from book import i18n

    words, phrases, patterns = set(), [], []
    names, _ = i18n.glossary(LANG)
    for line in [*path.read_text(encoding="utf-8").splitlines(), *names]:
        line = line.split(" #", 1)[0].strip() if not line.startswith("re:") else line.strip()
        if not line or line.startswith("#"):
            continue
        if line.startswith("re:"):
            patterns.append(re.compile(line[3:].strip()))
        elif " " in line:
            phrases.append(line)
        else:
            words.add(line if line != line.lower() else line.lower())  # "Ring" as written, "rank" in any case
    return words, sorted(phrases, key=len, reverse=True), patterns


_PUNCT = ".,;:!?()[]{}\"'“”‘’«»‹›…—–·•|*→←↑↓≈×~"
_CODE = re.compile(r"`[^`]*`|'[^'\s]+'|\S+://\S+|(?<!\w)--?[A-Za-z][\w-]*")
UNITS = {"s", "ms", "us", "µs", "ns", "min", "h", "B", "KB", "MB", "GB", "TB", "KiB", "MiB", "GiB", "TiB", "Gb", "Mb",
         "Tb", "bit", "Gbit", "Hz", "GHz", "FLOP", "FLOPs", "TFLOPs", "x"}
_OPERATOR = re.compile(r"[=×/+\-·*−<>≤≥→^]+|->|x")  # beside one, a formula's name: a = b × s


def chunks(line: str, allowed, depth: list[int] | None = None) -> list[str | None]:
    """The line's words in order: an English word as itself, anything else (code, numbers, units, acronyms,
    Chinese, a formula's names, allowed words) as None. depth: [the parentheses a call left open], carried from
    one line of a text to the next (a hint's call wrapped after an argument) and updated."""
    words, phrases, _ = allowed
    for phrase in phrases:
        line = line.replace(phrase, " ")
    raw = CJK.sub(" ", _CODE.sub(" ", line)).split()
    out: list[str | None] = []
    depth = depth if depth is not None else [0]  # inside a call's parentheses: max(compute, f(x), comm)
    for i, chunk in enumerate(raw):
        if depth[0] or re.search(r"\w\(", chunk):
            depth[0] = max(0, depth[0] + chunk.count("(") - chunk.count(")"))
            out.append(None)
            continue
        word = chunk.strip(_PUNCT)
        if word.endswith("'s"):
            word = word[:-2]
        beside = [c for c in raw[max(i - 1, 0):i] + raw[i + 1:i + 2]]
        english = (re.fullmatch(r"[A-Za-z][A-Za-z'-]*[A-Za-z]", word) is not None
                   and not re.fullmatch(r"[A-Z0-9-]+", word)
                   and not re.search(r"[a-z][A-Z]", word) and word not in UNITS and word.lower() not in words
                   and word not in words and not any(_OPERATOR.fullmatch(c) for c in beside)
                   and not re.search(r"[(/=]\w|\w[(/=]", chunk))  # f(x), a/b: code or a formula
        out.append(word if english else None)
    return out


def english(text: str, allowed, strict: bool) -> list[str]:
    """The English words of text that fail it: strict (a figure's, a widget's, a checker's text, or any line with
    Chinese in it), every one; else (a printed line with no Chinese: a measurement line) only a sentence's."""
    bad, depth = [], [0]
    for line in html.unescape(text).splitlines():
        if not line.strip() or any(p.search(line) for p in allowed[2]):
            continue
        found = chunks(line, allowed, depth if strict else [0])
        if strict or CJK.search(line):
            bad += [w for w in found if w]
            continue
        for column in re.split(r" {2,}|\t| \| ", line):  # a table's columns are no sentence
            run = []
            for w in [*chunks(column, allowed), None]:
                if w:
                    run.append(w)
                    continue
                if len(run) >= SENTENCE:
                    bad += run
                run = []
    return bad


class _Text(HTMLParser):
    """An HTML output's text as a reader meets it: the text between tags (not a script's or a style's), the
    attributes a browser shows (title, alt, aria-label, placeholder), and a script's strings with a space or
    Chinese in them or set as an element's text (an animation's captions and buttons)."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.texts, self._in = [], []

    def handle_starttag(self, tag, attrs):
        self._in.append(tag)
        self.texts += [v for k, v in attrs if k in ("title", "alt", "aria-label", "placeholder") and v]

    def handle_endtag(self, tag):
        while self._in and self._in.pop() != tag:
            pass

    def handle_data(self, data):
        where = self._in[-1] if self._in else ""
        if where == "style":
            return
        if where != "script":
            self.texts.append(data)
            return
        for m in re.finditer(r'"((?:[^"\\]|\\.)*)"', data):
            try:
                s = json.loads(f'"{m.group(1)}"')
            except ValueError:
                continue
            set_as_text = re.search(r"(textContent|innerText|alt)\s*=\s*[^;]*$", data[:m.start()].rsplit("\n", 1)[-1])
            if not s.startswith("data:") and (CJK.search(s) or (" " in s.strip() and re.search("[A-Za-z]", s))
                                             or set_as_text) and not re.fullmatch(r"[\w.#\[\]=\- ]*\[[^\]]*\]", s):
                self.texts.append(s)


def html_texts(value: str) -> list[str]:
    parser = _Text()
    parser.feed(value)
    return [t for t in parser.texts if t.strip()]


# ------------------------------------------------------------------ what a run showed, by chapter

def output_texts(outputs: list[dict]) -> list[tuple[str, str, bool]]:
    """(kind, text, strict) of a cell's outputs: printed text and results line by line, HTML's texts (strict);
    tracebacks (torch's and Python's own English) and widget views (their widgets are read apart) left out."""
    found = []
    for o in outputs:
        if o.get("output_type") == "stream":
            found.append((f"printed ({o.get('name', 'stdout')})", _joined(o.get("text", "")), False))
        for kind, value in (o.get("data") or {}).items():
            if kind == "text/plain" and not {"text/html", WIDGET} & set(o["data"]):  # a widget's repr is not shown
                found.append(("result", _joined(value), False))
            elif kind == "text/html":
                found += [("HTML", t, True) for t in html_texts(_joined(value))]
    return found


def _joined(value) -> str:
    return "".join(value) if isinstance(value, list) else str(value)


def from_run(run: Path) -> tuple[dict[str, list[tuple[str, str, bool]]], dict[str, str | None]]:
    """({chapter: [(kind, text, strict)]}, {chapter: the font its figures drew Chinese with}) of a recorded nbval
    run (book/nbrecord.py, commlib.ui.shown)."""
    from outputs import read_record

    shown, fonts = {}, {}
    for folder in sorted(p for p in run.iterdir() if p.is_dir()):
        texts = []
        path = folder / "outputs.jsonl"
        for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
            texts += output_texts(json.loads(line)["outputs"])
        ran = read_record(folder)
        texts += [("drawn in a figure", t, True) for t in ran["drawn"]]
        texts += [("on a widget", t, True) for t in ran["widget"]]
        texts += [(f"{checker}'s hint", t, True) for checker, t in ran["hints"]]
        shown[folder.name] = texts
        fonts[folder.name] = ran["font"]
    return shown, fonts


def from_stored(folder: Path = STORED) -> tuple[dict[str, list[tuple[str, str, bool]]], dict[str, str | None]]:
    """The same of the committed run (locales/zh_CN/outputs/)."""
    from commlib.ui.shown import widget_texts

    shown, fonts = {}, {}
    for path in sorted(folder.glob("[0-9]*.json")):
        stored = json.loads(path.read_text(encoding="utf-8"))
        texts = [t for cell in stored["cells"].values() for t in output_texts(cell["outputs"])]
        texts += [("drawn in a figure", t, True) for t in stored.get("drawn", [])]
        state = stored.get("widgets", {}).get("application/vnd.jupyter.widget-state+json", {}).get("state", {})
        for model in state.values():
            for t in widget_texts(model.get("state", {}), model.get("model_name", "")):
                texts += [("on a widget", x, True) for x in (html_texts(t) if "<" in t else [t])]
        texts += [(f"{checker}'s hint", t, True) for checker, t in stored.get("hints", [])]
        shown[path.stem] = texts
        fonts[path.stem] = stored.get("font")
    return shown, fonts


def english_left(shown: dict[str, list[tuple[str, str, bool]]], allowed=None, known=None) -> dict[str, list[str]]:
    """{chapter: ["kind: text  [words]"]} of every text that fails (see the module's docstring), leaving out the
    known leftovers (known(): tests/zh_english_known.txt)."""
    allowed = allowed or allowlist()
    known = known if known is not None else set()
    left = {}
    for chapter, texts in shown.items():
        seen = set()
        for kind, text, strict in texts:
            for line in text.splitlines() if not strict else [text]:
                words = english(line, allowed, strict)
                key = (kind, line.strip())
                if words and key not in seen and (chapter, _general(line)) not in known:
                    seen.add(key)
                    left.setdefault(chapter, []).append(f"{kind}: {line.strip()[:160]!r}  [{' '.join(words)}]")
    return left


KNOWN = Path(__file__).with_name("zh_english_known.txt")


def _general(text: str) -> str:
    """A text with its numbers as # (a measured line reads the same on every run)."""
    return re.sub(r"\d+(?:[.,]\d+)*", "#", " ".join(text.split()))


def known(path: Path = KNOWN) -> set[tuple[str, str]]:
    """The English left that the edition knows it still shows, {(chapter, text with its numbers as #)}: each line
    of tests/zh_english_known.txt is "NN_chapter | text". `python tests/test_zh_english.py --known` writes it from
    the committed run; a leftover translated since drops out of the next list, a new English text fails."""
    found = set()
    for line in path.read_text(encoding="utf-8").splitlines() if path.is_file() else []:
        if line.strip() and not line.startswith("#"):
            chapter, _, text = line.partition(" | ")
            found.add((chapter.strip(), text.strip()))
    return found


def shown_now() -> tuple[str, dict, dict]:
    """(which run, its texts by chapter, its fonts by chapter): the run COMMLIB_RECORD_RUN names, else the committed."""
    run = os.environ.get("COMMLIB_RECORD_RUN")
    if run and Path(run).is_dir() and any(Path(run).iterdir()):
        return f"the run recorded in {run}", *from_run(Path(run))
    return f"the committed run ({STORED.relative_to(ROOT)})", *from_stored()


# ------------------------------------------------------------------ the tests

@pytest.fixture(scope="module")
def shown():
    return shown_now()


@pytest.mark.parametrize("chapter", [p.stem for p in NOTEBOOKS])
def test_every_text_a_chapter_shows_in_zh_CN_is_chinese(shown, chapter):
    where, texts, fonts = shown
    assert chapter in texts, f"{chapter}: nothing recorded in {where} (did the chapter run?)"
    assert texts[chapter], f"{chapter}: {where} recorded no text"
    assert fonts.get(chapter) != "none", (f"{chapter}: the run had no font that draws Chinese, so its figures kept "
                                          "their English labels (Debian: apt-get install fonts-noto-cjk)")
    left = english_left({chapter: texts[chapter]}, known=known()).get(chapter, [])
    assert left == [], f"{chapter}: {len(left)} text(s) in English in {where}:\n" + "\n".join(left)


ALLOW = (set(), [], [])


@pytest.mark.parametrize("text, strict, words", [
    ("还不对。one ring leaves each node through one NIC", True, ["one", "ring", "leaves", "each", "node", "through",
                                                             "one"]),
    ("每节点 8 NICs", True, ["NICs"]),
    ("总线带宽 busbw_GBps 为 `all_reduce` 的 2(p-1)/p 倍，12.5 GB/s，NCCL", True, []),
    ("ring all-reduce of 4 MiB: 12.3 ms", False, []),
    ("dtype bits      largest        eps  min normal  min subnormal  mantissa bits", False, []),
    ("the timeline below covers backward and its all-reduces", False,
     ["the", "timeline", "below", "covers", "backward", "and", "its", "all-reduces"]),
    ("compute", True, ["compute"]),
    ("还不对。max(compute, comm) 忘了最后一个桶；compute = before × (1 - s) / s", True, []),
    ("rank 0 的 all-reduce（per direction）", True, ["rank", "all-reduce", "per", "direction"]),
])
def test_english_words_are_found_outside_code_units_and_acronyms(text, strict, words):
    assert english(text, ALLOW, strict) == words


def test_an_html_outputs_text_titles_and_script_captions_are_read():
    got = html_texts('<div title="first step"><button>play</button><script>const c = ["第 0 步", "data:x"];'
                     'b.textContent = "pause"; q("[data-go=play]");</script><style>a {}</style></div>')
    assert got == ["first step", "play", "第 0 步", "pause"]


if __name__ == "__main__":
    args = sys.argv[1:]
    if args and args[0] != "--known":
        os.environ["COMMLIB_RECORD_RUN"] = args[0]
    where, texts, _ = shown_now()
    if "--known" in args:  # the known leftovers, from this run: every English text it shows
        allowed, lines = allowlist(), set()
        for chapter, items in texts.items():
            for kind, text, strict in items:
                lines |= {f"{chapter} | {_general(line)}" for line in (text.splitlines() if not strict else [text])
                          if english(line, allowed, strict)}
        head = [line for line in KNOWN.read_text(encoding="utf-8").splitlines() if line.startswith("#")]
        KNOWN.write_text("\n".join([*head, *sorted(lines)]) + "\n", encoding="utf-8")
        print(f"{KNOWN}: {len(lines)} known leftover(s) from {where}")
        sys.exit(0)
    left = english_left(texts)
    print(f"# English in what the zh_CN chapters show ({where}): {sum(map(len, left.values()))} text(s)")
    for chapter, lines in left.items():
        print(f"\n## {chapter} ({len(lines)})")
        print("\n".join(lines))
