"""assets/ holds generated figures: regenerating them reproduces the committed files exactly."""

import subprocess
import sys
from pathlib import Path

ASSETS = Path(__file__).resolve().parents[1] / "assets"


def test_knowledge_map_is_generated_by_its_script(tmp_path, monkeypatch):
    sys.path.insert(0, str(ASSETS))
    try:
        import make_knowledge_map as km
    finally:
        sys.path.remove(str(ASSETS))
    committed = (ASSETS / "knowledge_map.svg").read_text()
    monkeypatch.setattr(km, "OUT", tmp_path / "knowledge_map.svg")
    fresh = km.main().read_text()
    assert fresh == committed, "run `python assets/make_knowledge_map.py` and commit the result"
    for words in ("Communication patterns", "Latency + bandwidth", "Overlap", "remedies", "65504"):
        assert words in fresh
