"""How often commlib's diagnosis and torch's own Flight Recorder analyser name the culprit, and it alone (issue 42).

The fault matrix (commlib/parallel/faults.py): issue 31's 7 programs x 6 faults, then issue 42's faults, each case
with a random culprit and debug on (DDP off: under TORCH_DISTRIBUTED_DEBUG=DETAIL torch 2.13 segfaults in DDP's
constructor on CPU). In each case the ranks' records are written as the files a timed-out NCCL job leaves
(flight_recorder.write_dumps) and read by:
  commlib        the diagnosis the error carries: those records, plus what the cluster saw (who died, who
                 returned, who raised, the call each rank waits in, pending sends/recvs, roots and reduce ops);
  commlib_files  commlib's diagnosis of the dump files alone (flight_recorder.read_dumps), nothing else;
  torch          torch 2.13's analyser (torch.distributed.flight_recorder.fr_trace, `torchfrtrace`) on the same
                 files: the ranks it names ("Culprit rank N", "missing ranks: {...}").
Each verdict: alone (the culprit, no other rank), superset (the culprit and others), wrong, nothing.
Under DETAIL a collective whose check fails or waits is never issued, so never recorded: the same cases are run
again with debug off ("debug_off" in the JSON), where the records hold it (and where a reduce op, or a root
after context parallel, goes through with no error: nothing to diagnose).

    python benchmarks/fault_diagnosis.py [--seed N] [--out benchmarks/fault_diagnosis.json]
    python benchmarks/fault_diagnosis.py --quick     # 3 cases without a program before them; writes nothing
"""

import contextlib
import io
import json
import logging
import os
import random
import re
import tempfile
import time

import commlib as cl
from commlib.bench import arguments
from commlib.cluster import diagnosis, flight_recorder
from commlib.parallel import faults

PRELOAD = ("torch.distributed.fsdp", "torch.distributed.tensor.debug", "commlib.parallel.live")
PROGRAM_TIMEOUT, TIMEOUT = 120.0, 3.0
QUICK = [(None, "op", "31"), (None, "tag", "42"), (None, "reduce_op", "42")]


def cases(seed: int, quick: bool, debug: bool = True) -> list[dict]:
    rng = random.Random(seed)
    plan = QUICK if quick else ([(p, f, "31") for p in faults.PROGRAMS for f in faults.KINDS]
                                + [(before, f, "42") for before, f, _ in faults.ISSUE_42])
    return [{"program": p, "fault": f, "issue": issue, "culprit": rng.randrange(faults.WORLD),
             "debug": debug and p not in faults.NO_DEBUG} for p, f, issue in plan]


def verdict(named, culprit: int) -> str:
    named = set(named or ())
    return ("alone" if named == {culprit} else "superset" if culprit in named else "wrong" if named else "nothing")


def torch_analyser(folder: str) -> tuple[list[int], str]:
    """torch's analyser, in this process (no second torch import per case) -> (ranks it names, what it printed)."""
    from torch.distributed.flight_recorder import fr_trace

    log = logging.getLogger("Flight Recorder")
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    log.addHandler(handler)
    saved = [(h, h.stream) for h in log.handlers if isinstance(h, logging.StreamHandler) and h is not handler]
    for h, _ in saved:
        h.setStream(io.StringIO())  # its own handler writes to stderr: keep the table readable
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            fr_trace.main([folder, "-p", "rank_", "--allow-incomplete-ranks"])
    except (Exception, SystemExit) as e:  # it gives up on some record sets: that names nobody
        out.write(f"\nanalyser stopped: {type(e).__name__}: {e}")
    finally:
        log.removeHandler(handler)
        for h, stream in saved:
            h.setStream(stream)
    text = out.getvalue()
    named = {int(r) for r in re.findall(r"Culprit rank (\d+)", text)}
    for group in re.findall(r"missing ranks: \{([\d, ]*)\}", text):
        named |= {int(r) for r in group.split(",") if r.strip()}
    return sorted(named), text


def run_case(c, case: dict) -> dict:
    if c.debug != case["debug"]:
        c.debug = case["debug"]
        c.restart()
    if case["program"]:
        c.timeout = PROGRAM_TIMEOUT
        c.run(faults.PROGRAMS[case["program"]])
    c.timeout = TIMEOUT
    fn = faults.fault if case["issue"] == "31" else faults.fault42
    start = time.monotonic()
    snaps, d = {}, None
    try:
        c.run(fn, case["fault"], case["culprit"])
        c.restart()  # a fault that went through unnoticed: fresh ranks for the next case
    except (cl.RankError, cl.ClusterTimeout) as e:
        snaps, d = e.snapshots or {}, e.diagnosis
    row = dict(case, seconds=round(time.monotonic() - start, 2))
    row["commlib"] = {"kind": d and d["kind"], "ranks": d and d["ranks"],
                      "verdict": verdict(d and d["ranks"], case["culprit"])}
    with tempfile.TemporaryDirectory() as folder:
        written = flight_recorder.write_dumps(snaps, folder)
        files = diagnosis.diagnose(flight_recorder.read_dumps(folder), faults.WORLD) if written else None
        named, _ = torch_analyser(folder) if written else ([], "no dump files")
    row["commlib_files"] = {"kind": files and files["kind"], "ranks": files and files["ranks"],
                            "verdict": verdict(files and files["ranks"], case["culprit"])}
    row["torch_analyser"] = {"ranks": named, "verdict": verdict(named, case["culprit"])}
    return row


def measure(todo: list, quick: bool) -> list[dict]:
    rows = []
    with cl.Cluster(faults.WORLD, timeout=PROGRAM_TIMEOUT, preload=() if quick else PRELOAD) as c:
        for case in todo:
            row = run_case(c, case)
            rows.append(row)
            print(f"{row['program'] or '-':17} {row['fault']:22} culprit {row['culprit']} debug={row['debug']!s:5} "
                  f"commlib {row['commlib']['verdict']:8} {str(row['commlib']['ranks']):12} "
                  f"files {row['commlib_files']['verdict']:8} torch {row['torch_analyser']['verdict']:8} "
                  f"{str(row['torch_analyser']['ranks']):12} {row['seconds']:.1f} s", flush=True)
    return rows


def summary(rows: list) -> dict:
    count = {k: sum(r[k]["verdict"] == "alone" for r in rows) for k in ("commlib", "commlib_files", "torch_analyser")}
    return {"cases": len(rows), "commlib_correct": count["commlib"], "commlib_files_correct": count["commlib_files"],
            "torch_analyser_correct": count["torch_analyser"]}


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--quick", action="store_true", help="3 cases, no program before them; writes nothing")
    ap.add_argument("--seed", type=arguments.integer(0, 2**31), default=None, help="culprits' seed (default: random)")
    ap.add_argument("--out", default=None, type=arguments.output_file, help="JSON file (default benchmarks/fault_diagnosis.json; --quick: none)")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else random.SystemRandom().randrange(2**31)
    load_before = os.getloadavg()[0]
    passes = {"on": measure(cases(seed, a.quick), a.quick)}
    if not a.quick:
        passes["off"] = measure(cases(seed, a.quick, debug=False), a.quick)
    import torch

    result = {**summary(passes["on"]), "seed": seed, "torch": torch.__version__,
              "load": round(max(load_before, os.getloadavg()[0]), 1), "rows": passes["on"]}
    if "off" in passes:
        result["debug_off"] = {**summary(passes["off"]), "rows": passes["off"]}
    for label, rows in passes.items():
        count, n = summary(rows), len(rows)
        print(f"debug {label}: culprit named alone, of {n} cases: commlib {count['commlib_correct']} "
              f"({count['commlib_correct'] / n:.0%}), commlib from the dump files alone {count['commlib_files_correct']} "
              f"({count['commlib_files_correct'] / n:.0%}), torch's analyser {count['torch_analyser_correct']} "
              f"({count['torch_analyser_correct'] / n:.0%}); seed {seed}")
    if not a.quick:
        out = a.out or os.path.join(os.path.dirname(os.path.abspath(__file__)), "fault_diagnosis.json")
        with open(out, "w") as f:
            json.dump(result, f, indent=1)
            f.write("\n")
        print(f"written: {out}")


if __name__ == "__main__":
    main()
