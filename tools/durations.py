#!/usr/bin/env python3
"""Where the test suite's time goes: seconds per test file, and the whole run's, as tests/durations.json.

    python tools/durations.py --run [PYTEST ARGS...]    # runs pytest (with --junitxml) from the project's root
    python tools/durations.py --junitxml report.xml     # reads a run's JUnit XML (pytest --junitxml=...)
    python tools/durations.py --log pytest.log          # reads `pytest --durations=0 --durations-min=0` output
    --out FILE (default tests/durations.json) goes before --run, which takes the rest of the line

Output: {"total_s": the run's wall time, "tests": {file: seconds}}, slowest file first. total_s is the pytest
process's wall time with --run, the report's suite time with --junitxml, pytest's last line with --log.
A file's seconds are the sum over its tests of setup + call + teardown (a module fixture's start is in the
first test's setup); collection and interpreter start are in total_s only. A --log without --durations-min=0
drops each phase under 5 ms (pytest hides them), which moves no file's sum by more than a few tenths.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import stat
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_BYTES = 64 << 20  # a full run's JUnit XML is ~1 MB; anything far larger is not one

# "12.34s call     tests/test_x.py::test_y[a]" (pytest's --durations lines); "6482 passed, 20 skipped in 1032.5s"
# (with -q; framed in "=" without)
DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)s\s+(?:setup|call|teardown)\s+(\S[^:]*?)::")
TOTAL = re.compile(r"^=*\s*\d+ (?:passed|failed|errors?|skipped|deselected|xfailed|xpassed|warnings?)\b.*"
                   r"\bin (\d+(?:\.\d+)?)s\b")


def read_text(path) -> str:
    """A regular file of at most MAX_BYTES, as UTF-8 (a FIFO or a device is refused before it is opened)."""
    info = os.stat(path)
    if not stat.S_ISREG(info.st_mode):
        raise ValueError(f"{path} is not a regular file")
    if info.st_size > MAX_BYTES:
        raise ValueError(f"{path} has {info.st_size} bytes, more than {MAX_BYTES} (not one pytest run's report)")
    with open(path, "rb") as f:
        return f.read(MAX_BYTES + 1).decode("utf-8", errors="replace")


def ordered(total_s: float, per_file: dict) -> dict:
    """The JSON's shape: slowest file first, seconds to 0.01."""
    files = sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"total_s": round(total_s, 2), "tests": {f: round(s, 2) for f, s in files}}


def parse_log(text: str) -> dict:
    """pytest --durations output -> {"total_s", "tests"}; ValueError when it has no durations or no total."""
    per_file, total = {}, None
    for line in text.splitlines():
        m = DURATION.match(line)
        if m:
            per_file[m.group(2)] = per_file.get(m.group(2), 0.0) + float(m.group(1))
        elif t := TOTAL.match(line):
            total = float(t.group(1))
    if not per_file:
        raise ValueError("no '--durations' lines (run pytest with --durations=0 --durations-min=0)")
    if total is None:
        raise ValueError("no final '... passed in N s' line: the run did not finish")
    return ordered(total, per_file)


def test_file(classname: str, root: Path = ROOT) -> str:
    """A JUnit classname -> its file: tests.test_x[.TestClass] -> tests/test_x.py; notebooks.ch.ipynb -> notebooks/ch.ipynb."""
    parts = classname.split(".")
    if parts[-1] == "ipynb":
        return "/".join(parts[:-1]) + ".ipynb"
    for n in range(len(parts), 0, -1):  # the longest dotted prefix that is a file: the rest names classes
        candidate = "/".join(parts[:n]) + ".py"
        if (root / candidate).is_file():
            return candidate
    return "/".join(parts) + ".py"


def parse_junit(text: str, root: Path = ROOT) -> dict:
    """pytest's --junitxml report -> {"total_s", "tests"}; ValueError when it is not one."""
    if "<!DOCTYPE" in text or "<!ENTITY" in text:
        raise ValueError("a JUnit report has no DOCTYPE or entities")
    try:
        top = ET.fromstring(text)
    except ET.ParseError as e:
        raise ValueError(f"not XML: {e}") from None
    suites = [top] if top.tag == "testsuite" else top.findall("testsuite")
    if not suites:
        raise ValueError("no <testsuite> element")
    per_file = {}
    for case in top.iter("testcase"):
        name = test_file(case.get("classname", ""), root)
        per_file[name] = per_file.get(name, 0.0) + float(case.get("time", 0.0))
    return ordered(sum(float(s.get("time", 0.0)) for s in suites), per_file)


def run(pytest_args: list[str]) -> dict:
    """Run pytest from the project's root with a JUnit report in a temporary folder; its output goes through."""
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "junit.xml"
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "pytest", f"--junitxml={report}", *pytest_args], cwd=ROOT, check=False)
        wall = time.perf_counter() - t0
        if not report.is_file():
            raise ValueError("pytest wrote no report (see its output above)")
        return ordered(wall, parse_junit(read_text(report))["tests"])


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line and exit 2, no usage block
        print(f"durations: {message}", file=sys.stderr)
        raise SystemExit(2)


def main(argv=None) -> int:
    ap = Parser(description=__doc__.split("\n")[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--run", nargs=argparse.REMAINDER, metavar="PYTEST_ARGS", help="run pytest with these arguments")
    src.add_argument("--junitxml", help="a pytest --junitxml report")
    src.add_argument("--log", help="pytest output with --durations=0 --durations-min=0")
    ap.add_argument("--out", default=str(ROOT / "tests" / "durations.json"), help="where to write (default: %(default)s)")
    args = ap.parse_args(argv)
    try:
        if args.run is not None:
            result = run(args.run)
        elif args.junitxml:
            result = parse_junit(read_text(args.junitxml))
        else:
            result = parse_log(read_text(args.log))
        Path(args.out).write_text(json.dumps(result, indent=1) + "\n")
    except (OSError, ValueError) as e:
        print(f"durations: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(result['tests'])} files, {result['total_s']:.0f} s in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
