"""Chapter 0's and README's chapter tables name each chapter by its own title (issue 52 item 14)."""

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHAPTERS = sorted((ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))


def _title(path: Path) -> str:
    first = "".join(json.loads(path.read_text())["cells"][0]["source"]).splitlines()[0]
    return first.lstrip("# ").strip()


def test_chapter_0_links_every_other_chapter_under_its_title():
    cells = json.loads(CHAPTERS[0].read_text())["cells"]
    text = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    rows = dict((stem, label) for label, stem in re.findall(r"^\| \[([^\]]+)\]\((\d\d_\w+)\.ipynb\) \|", text, re.M))
    assert rows == {p.stem: _title(p) for p in CHAPTERS[1:]}


def test_the_readme_table_names_every_chapter_by_file_and_title():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\d\d_\w+)` · ([^|]+?) \|", readme, re.M))
    assert rows == {p.stem: _title(p).split(" · ", 1)[1] for p in CHAPTERS}
