"""commlib.ui.language: what a learner reads, in the notebook's language. English unless a notebook asks, whatever
the system's LANG says; the catalogs' templates rebuild the checkers' rendered verdicts; every verdict the chapters
print comes out Chinese in the zh_CN edition."""

import importlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from commlib.ui import language
from commlib.exercises import Verdict
from commlib.exercises.answers import WIDTH

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
VERDICT = re.compile(r"^(Correct\. |Not yet\. )(.*(?:\n(?!Correct|Not yet|\[rank|$).*)*)", re.MULTILINE)
CJK = re.compile(r"[\u3400-\u9fff]")


@pytest.fixture
def zh():
    language.set_language("zh_CN")
    yield language
    language.set_language(None)


def test_english_unless_asked_whatever_the_system_says(monkeypatch):
    monkeypatch.setenv("LANG", "zh_CN.UTF-8")
    monkeypatch.setenv("LANGUAGE", "zh_CN")
    monkeypatch.delenv(language.ENV, raising=False)
    importlib.reload(language)
    assert language.language() is None and language.tr("Correct. ") == "Correct. "
    assert repr(Verdict(True, "every rank returned 3.")) == "Correct. every rank returned 3."


def test_an_edition_without_catalogs_is_refused_naming_lang():
    with pytest.raises(ValueError, match=r"lang: 'xx' has no catalogs; choose one of zh_CN"):
        language.set_language("xx")
    assert language.language() is None


def test_the_language_reaches_what_starts_afterwards(zh):
    assert os.environ[language.ENV] == "zh_CN"
    done = subprocess.run([sys.executable, "-c", "from commlib.ui import language; print(language.language())"],
                          capture_output=True, text=True, timeout=60, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.stdout.strip() == "zh_CN"
    language.set_language(None)
    assert language.ENV not in os.environ


def test_a_rendered_verdict_is_rebuilt_from_its_template_and_wrapped_by_columns(zh):
    assert repr(Verdict(True, "every rank holds 1 + 2 + ... + 8 = 36.")) == "正确。每个 rank 都持有 1 + 2 + ... + 8 = 36。"
    # holes reordered ({1} before {0}), and a listing translated item by item
    assert language.tr("31 of the 136 pairs the mask leaves (contiguous); zigzag: 17. The ring's step waits for the "
                       "busiest.").startswith("掩码留下的 136 对中的 31 对（contiguous）")
    assert language.tr("1 MiB: 2.0 ms, 4 MiB: 3.5 ms.") == "桶上限 1 MiB：2.0 ms，桶上限 4 MiB：3.5 ms。"
    assert language.tr("a message no catalog has, 3 ms.") == "a message no catalog has, 3 ms."
    long = repr(Verdict(True, "the replay keeps every compute duration as measured: a change in compute speed is "
                              "not in the trace. Links, nodes and buckets change only communication, which it prices."))
    assert all(language.width(line) <= WIDTH for line in long.split("\n")) and long.count("\n") == 1


def test_every_verdict_the_chapters_print_comes_out_chinese(zh):
    """The verdicts the English chapters print (their committed outputs), as the zh_CN edition prints them: a
    verdict left in English is listed. A checker whose English changed needs its template updated in
    locales/zh_CN/LC_MESSAGES/commlib/exercises.po."""
    english = []
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            for out in cell.get("outputs", []):
                text = "".join(out.get("text", "")) or "".join(out.get("data", {}).get("text/plain", ""))
                for m in VERDICT.finditer(text):
                    message = m.group(2).replace("\n", " ")  # the checker's message, unwrapped
                    if not CJK.search(language.tr(message)):
                        english.append(f"{path.stem}: {message[:90]}")
    assert english == [], f"{len(english)} verdict(s) left in English:\n" + "\n".join(english)
