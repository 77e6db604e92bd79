"""ruff with pyflakes' rules (F: unused imports and variables, undefined names, ...) on the package, the
benchmarks and the tools must be clean (issue 35). The rules and paths are in pyproject.toml; ruff is pinned in
requirements.txt."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_ruff_finds_nothing_in_the_package_benchmarks_and_tools():
    try:
        import ruff  # noqa: F401  (only to say clearly when it is missing)
    except ImportError:
        raise AssertionError("ruff is not installed: pip install -r requirements.txt (it pins ruff)") from None
    out = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--output-format=concise",
                          "commlib", "benchmarks", "tools"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "All checks passed" in out.stdout
