"""The command lines of benchmarks/: ranged argument types, one-line errors, and a memory check before any rank starts.

    ap = arguments.Parser(__doc__)
    ap.add_argument("--iters", type=arguments.integer(1, 10**6), default=10, help="...")
    a = ap.parse_args()
    ap.check_memory(ranks=4, per_rank=4 * a.max_bytes, what=f"--max-bytes {a.max_bytes}")

A bad argument ends the script with exit code 2 and one line naming it (argparse's own "argument --iters: ..."),
never a traceback; a run that would not fit in this machine's free memory is refused the same way, before it
allocates anything, instead of being killed half-way by the kernel's out-of-memory killer.
"""

from __future__ import annotations

import argparse
import os
import sys

from commlib import _validate as check

# A rank process before it allocates anything: the interpreter with torch and Gloo loaded: 160 MiB resident
# (psutil in a Cluster rank, Linux, torch 2.13 CPU); 200 MiB leaves room for what each benchmark imports.
RANK_BYTES = 200 << 20


class Parser(argparse.ArgumentParser):
    def __init__(self, doc: str | None, **kwargs):
        super().__init__(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)

    def error(self, message: str):
        """One line, no usage block (argparse's errors, and ours)."""
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        raise SystemExit(2)

    def check_memory(self, ranks: int, per_rank: float, what: str) -> None:
        """Refuse (exit 2) a run whose `ranks` processes, each holding per_rank bytes of data, need more than the
        memory free now."""
        free = available_memory()
        need = ranks * (RANK_BYTES + per_rank)
        if free is not None and need > free:
            self.error(f"{what} needs about {need / 1e9:.3g} GB ({ranks} rank(s) x ({RANK_BYTES / 1e9:.2g} GB for "
                       f"torch + {per_rank / 1e9:.3g} GB of data)), more than the {free / 1e9:.3g} GB free now")


def available_memory() -> int | None:
    """Bytes of memory free for new processes now: Linux's MemAvailable, else sysconf's free pages; None if
    neither can say (then no check is made)."""
    try:
        with open("/proc/meminfo", encoding="ascii") as f:
            for line in f.read(1 << 16).splitlines():  # a few KB; bounded all the same
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_AVPHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return None


def _typed(convert, name: str):
    def parse(text: str):
        try:
            return convert(text)
        except (TypeError, ValueError) as e:
            raise argparse.ArgumentTypeError(str(e).replace(f"{name} must be", "must be", 1)) from None
    parse.__name__ = name  # argparse says "invalid <name> value" only for its own errors; ours pass through
    return parse


def integer(low: int = 1, high: int | None = None):
    """An argparse type: an int in [low, high]."""
    def convert(text):
        try:
            value = int(text)
        except ValueError:
            raise ValueError(f"value must be an int, got {text!r}") from None
        return check.integer("value", value, low, high)
    return _typed(convert, "value")


def number(low: float = 0.0, high: float | None = None, strict: bool = True):
    """An argparse type: a finite float > low (>= low if not strict), <= high."""
    def convert(text):
        try:
            value = float(text)
        except ValueError:
            raise ValueError(f"value must be a number, got {text!r}") from None
        return check.number("value", value, low, strict, high=high)
    return _typed(convert, "value")


def size(low: int = 1, high: int = 1 << 40):
    """An argparse type: a size like 512, 1K, 64M, 1G, in [low, high] bytes."""
    def convert(text):
        value = check.parse_size(text)
        if not low <= value <= high:
            raise ValueError(f"value must be a size in [{low}, {high}] bytes, got {text!r} = {value}")
        return value
    return _typed(convert, "value")


def output_file(text: str) -> str:
    """An argparse type for --json/--out: a file in a folder that exists (checked before anything runs, so a long
    run does not end in a traceback when it writes)."""
    if not text or os.path.isdir(text) or not os.path.isdir(os.path.dirname(os.path.abspath(text))):
        raise argparse.ArgumentTypeError(f"{text!r} must be a file in a folder that exists")
    return text


def sizes_of(texts, low: int = 1, high: int = 1 << 40, name: str = "--sizes") -> list[int]:
    """A list of sizes given as text (a nargs option), each in [low, high]; ValueError naming the option."""
    out = []
    for t in texts:
        try:
            out.append(size(low, high)(t))
        except argparse.ArgumentTypeError as e:
            raise ValueError(f"argument {name}: {e}") from None
    return out


def kernel_run(doc: str | None, repeats: int, what: str):
    """The command line of a benchmark that measures the kernel network: --bandwidth (each NIC, bytes/s),
    --repeats (`what`, default `repeats`), --json, --quick -> its arguments, or None where no kernel network can be
    built here (root, or a user namespace), said in one line."""
    from commlib.network import available   # here: the network package is needed only by these benchmarks

    ap = Parser(doc)
    ap.add_argument("--bandwidth", type=number(1e6, 1e10), default=10e6, help="each NIC, bytes/s")
    ap.add_argument("--repeats", type=integer(1, 1000), default=repeats, help=what)
    ap.add_argument("--json", type=output_file, help="also write the result here")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI")
    a = ap.parse_args()
    ok, why = available()
    if not ok:
        print(f"kernel network not available here: {why}")
        return None
    return a
