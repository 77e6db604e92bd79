"""Diagnose at scale: `python -m commlib diagnose` on synthetic traces of a real job's shape, 1k to 1M events per
rank, 1 to 64 ranks, against the stdlib's json.load of the same files and Holistic Trace Analysis.

    python benchmarks/diagnose_scale.py [--quick] [--hta-python PATH] [--out benchmarks/diagnose_scale.json]

Traces: commlib.profiling.jobs.synthetic (Kineto's GPU format with torch >= 2.3's collective arguments on the NCCL
kernels, 5% of kernels NCCL; the same without the arguments; a CPU/Gloo job), written to a temporary folder.
Per case: the CLI end to end (a fresh process: start-up, reading, analysis, report), its peak memory (RSS of
the process and its reader workers together, sampled every 10 ms in a run of its own: the sampler's CPU would
slow a timed run by 10%), events per second, the growth exponent
against the case before it (time ~ events^k: 1 is linear), the Python call diagnose() in this process,
json.load of the same files one after the other, and Holistic Trace Analysis (TraceAnalysis +
get_comm_comp_overlap) where it is importable by --hta-python (default: this interpreter), with its peak memory
and its time / diagnose's, run both ways in the same run: its default parser, and the batched ijson backend its
ParserConfig documents "for best results" on large traces (ParserBackend.IJSON_BATCH_AND_COMPRESS with
ParserConfig.get_minimum_args(), set through ParserConfig.set_default_cfg; needs ijson). Its version (the
traceinsight or holistictraceanalysis distribution) is recorded. Every row records the 1-minute load before and
after it: the machine may be shared. In each 2 x 1M-event case diagnose and json.load run REPEATS (3)
times, alternating, and the row keeps their medians (one run of each moves by 10% on a quiet machine here).
The 2 x 1M-event case runs twice: on the machine as it is (quiet, under
`flock -x`), and again under a load of BUSY it makes itself (BUSY processes spinning `while True: pass`, started
after the traces are written, killed after the case), json.load and diagnose alike. BUSY is 1 (it was 3 before
issue 65 item 3): one other busy process beside the reader, which counts on every core (one reading process per
core: on 2 cores the parent and one worker, so 3 runnable processes share 2 cores; json.load uses one core and
is barely slowed). The targets: diagnose / json.load <= 0.25 quiet, <= 0.35 under that load (and within 1.3x
of quiet).
Holistic Trace Analysis where it cannot run here: its figures are carried from the file's previous run, said so
in meta (hta_from), never mixed silently.
--quick (what CI runs): small sizes, no HTA, writes nothing. The full run writes its figures, labelled with the
machine and its load, to --out; chapter 9's scale figure reads them.
"""

import argparse
import datetime
import json
import math
import os
import platform
import resource
import subprocess
import sys
import tempfile
import threading
import time

import psutil

from commlib.bench import arguments
from commlib.profiling.diagnosis import diagnose
from commlib.profiling.jobs import synthetic

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
HTA_SCRIPT = """
import logging, sys, time
logging.disable(logging.WARNING)
t = time.perf_counter()
from hta.trace_analysis import TraceAnalysis
if sys.argv[2] != "default":   # HTA's batched backend, with the minimum args (hta/configs/parser_config.py)
    from hta.configs.parser_config import ParserBackend, ParserConfig
    cfg = ParserConfig(ParserConfig.get_minimum_args())
    cfg.set_parser_backend(ParserBackend(sys.argv[2]))
    ParserConfig.set_default_cfg(cfg)
TraceAnalysis(trace_dir=sys.argv[1]).get_comm_comp_overlap(visualize=False)
print("HTA_SECONDS", time.perf_counter() - t)
"""
HTA_VERSION = """
import importlib.metadata as m
for name in ("traceinsight", "holistictraceanalysis"):
    try:
        print(name, m.version(name))
        break
    except m.PackageNotFoundError:
        pass
"""
# HTA's two parsers: row key prefix -> (the backend argument of HTA_SCRIPT, what it is)
HTA_BACKENDS = {"hta": ("default", "default parser (ParserBackend JSON: json.load of the whole file), default args"),
                "hta_batched": ("ijson_batch_and_compress", "ParserBackend.IJSON_BATCH_AND_COMPRESS with "
                                "ParserConfig.get_minimum_args(), set through ParserConfig.set_default_cfg")}
PEAK_NOTE = ("peak RSS of the process and all its child processes (reader workers, HTA's parser pool) summed, "
             "sampled every 10 ms: a sum over processes, not the largest one")
# (name, form, kernel args on the NCCL kernels, ranks, events per rank, run HTA)
FULL = [("gpu", "gpu", True, 2, 10_000, True), ("gpu", "gpu", True, 2, 100_000, True),
        ("gpu", "gpu", True, 2, 1_000_000, True), ("gpu, no kernel args", "gpu", False, 2, 100_000, False),
        ("cpu/gloo", "cpu", True, 2, 100_000, False),
        ("one rank", "gpu", True, 1, 100_000, False), ("64 ranks", "gpu", True, 64, 100_000, False)]
QUICK = [("gpu", "gpu", True, 2, 2_000, False), ("gpu", "gpu", True, 2, 20_000, False),
         ("gpu, no kernel args", "gpu", False, 2, 5_000, False), ("cpu/gloo", "cpu", True, 2, 5_000, False),
         ("4 ranks", "gpu", True, 4, 5_000, False)]
REPEATS = 3   # runs of diagnose and of json.load, alternating, in each 2 x 1M-event case (their medians)
BUSY = 1   # busy-loop processes of the loaded run: a load of ~1 on top of the machine's own (3 before issue 65)
LOADED = ("gpu, loaded", "gpu", True, 2, 1_000_000, False)   # the quick run: the same at 2 x 20,000 events


def timed(cmd: list[str], sample: bool = True) -> dict:
    """Run cmd; wall seconds, CPU seconds (user + system of it and every process it waited for: on a loaded
    machine these grow with the work, not with the wait), peak RSS (bytes) of it and its children together
    (sample=False: None, and no sampler thread: sampling every 10 ms took 0.3 s of a 2.6 s diagnose on 2 cores),
    exit code, stdout, stderr."""
    env = {**os.environ, "PYTHONPATH": ROOT + os.pathsep + os.environ.get("PYTHONPATH", "")}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    peak, done = [0], threading.Event()

    def sample_rss():
        proc = psutil.Process(p.pid)
        while not done.is_set():
            try:
                rss = proc.memory_info().rss + sum(c.memory_info().rss for c in proc.children(recursive=True))
                peak[0] = max(peak[0], rss)
            except psutil.Error:
                pass
            done.wait(0.01)

    th = threading.Thread(target=sample_rss, daemon=True)
    if sample:
        th.start()
    try:
        out, err = p.communicate(timeout=1800)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        done.set()
        if sample:
            th.join()
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
    return {"s": time.perf_counter() - t0, "cpu": cpu, "rss": peak[0] if sample else None, "rc": p.returncode,
            "out": out.decode(),
            "err": err.decode()}


def hta_python(arg: str | None) -> str | None:
    """An interpreter that can import hta and ijson (HTA's batched backend needs it), or None."""
    py = arg or sys.executable
    ok = subprocess.run([py, "-c", "import hta.trace_analysis, ijson"], capture_output=True,
                        timeout=120).returncode == 0
    return py if ok else None


def hta_version(py: str) -> str | None:
    """'traceinsight 0.6.1' (the distribution HTA came from, and its version), or None."""
    out = subprocess.run([py, "-c", HTA_VERSION], capture_output=True, text=True, timeout=120).stdout.strip()
    return out or None


def interpreter(text: str) -> str:
    """--hta-python: an executable file that can import Holistic Trace Analysis."""
    if not (os.path.isfile(text) and os.access(text, os.X_OK)):
        raise argparse.ArgumentTypeError(f"{text!r} is not an executable file")
    if hta_python(text) is None:
        raise argparse.ArgumentTypeError(f"{text} cannot import hta and ijson (pip install traceinsight==0.6.1 "
                                         "ijson there)")
    return text


def busy_loops(n: int) -> list:
    """n processes spinning on a core each (the loaded run's load); the caller kills them."""
    return [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(n)]


def run_case(folder, name, form, kernel_args, ranks, events, with_hta, hta_py, busy: int = 0) -> dict:
    d = os.path.join(folder, f"{form}-{int(kernel_args)}-{ranks}x{events}")
    files = synthetic.write_job(d, ranks, events, form, kernel_args)
    if hasattr(os, "sync"):   # the files' pages on disk before anything is timed: the kernel's writeback of 480 MB
        os.sync()             # just written ran beside the first 2 x 1M run and slowed it by 20%
    spinning = busy_loops(busy)
    try:
        time.sleep(1.0 if busy else 0.0)   # the loops running before anything is timed
        row = _measure(d, files, name, form, kernel_args, ranks, events, with_hta, hta_py)
    finally:
        for p in spinning:
            p.kill()
            p.wait()
    row["busy_loops"] = busy
    for f in files:
        os.remove(f)
    return row


def _json_load(files) -> tuple[float, float]:
    """The stdlib alone, the same files one after the other -> (wall s, CPU s)."""
    t, c0 = time.perf_counter(), time.process_time()
    for f in files:
        with open(f) as fh:
            json.load(fh)
    return time.perf_counter() - t, time.process_time() - c0


def _measure(d, files, name, form, kernel_args, ranks, events, with_hta, hta_py) -> dict:
    load_before = os.getloadavg()[0]
    # the ratio's cases (2 x 1M events) run REPEATS times, diagnose and json.load alternating: one run of each
    # moves by 10% between runs on a quiet machine (the noise floor), the median of three far less
    # the times come from runs without the memory sampler, the peak from one more run with it
    repeats = REPEATS if events >= 1_000_000 else 1
    clis, loads = [], []
    command = [sys.executable, "-m", "commlib", "diagnose", d, "--json"]
    for _ in range(repeats):
        clis.append(timed(command, sample=False))
        if clis[-1]["rc"] != 0:
            raise SystemExit(f"diagnose failed on {d}: {clis[-1]['err'][-500:]}")
        if ranks <= 2:
            loads.append(_json_load(files))
    cli = sorted(clis, key=lambda c: c["s"])[len(clis) // 2]
    peak = timed(command)["rss"]
    report = json.loads(cli["out"])
    t, c0, w0 = time.perf_counter(), time.process_time(), resource.getrusage(resource.RUSAGE_CHILDREN)
    diagnose(d)
    call_s = time.perf_counter() - t
    w1 = resource.getrusage(resource.RUSAGE_CHILDREN)   # + the reader workers'
    call_cpu = time.process_time() - c0 + w1.ru_utime + w1.ru_stime - w0.ru_utime - w0.ru_stime
    row = {"case": name, "form": form, "kernel_args": kernel_args, "ranks": ranks, "events_per_rank": events,
           "calls": len(report["calls"]), "cli_s": cli["s"], "cli_cpu_s": cli["cpu"], "call_s": call_s,
           "call_cpu_s": call_cpu,
           "peak_rss_bytes": peak, "bytes_on_disk": sum(os.path.getsize(f) for f in files),
           "json_load_s": None, "json_load_cpu_s": None,
           **{f"{k}{x}": None for k in HTA_BACKENDS for x in ("_s", "_cpu_s", "_rss_bytes", "_note")}}
    if repeats > 1:   # every run, in order; cli_s and json_load_s are the medians
        row["cli_runs_s"] = [c["s"] for c in clis]
        row["json_load_runs_s"] = [s for s, _ in loads]
    if loads:
        row["json_load_s"], row["json_load_cpu_s"] = sorted(loads)[len(loads) // 2]
    for key, (backend, _) in HTA_BACKENDS.items() if with_hta and hta_py else ():
        h = timed([hta_py, "-c", HTA_SCRIPT, d, backend])
        if h["rc"] == 0:
            row[f"{key}_s"], row[f"{key}_cpu_s"], row[f"{key}_rss_bytes"] = h["s"], h["cpu"], h["rss"]
        else:
            row[f"{key}_note"] = "failed: " + (h["err"].strip().splitlines() or ["?"])[-1][:120]
    row["load_1min"] = [load_before, os.getloadavg()[0]]   # before the CLI ran, after the last tool
    return row


def carry_hta(rows: list[dict], path: str) -> dict:
    """Where HTA cannot run here: its columns of the same cases (case, ranks, events) from the file's previous
    run -> the meta to record it by ({hta_from: that run's date and load, hta_version}), {} if nothing carried."""
    try:
        with open(path) as f:
            old = json.load(f)
    except (OSError, ValueError):
        return {}
    before = {(r["case"], r["ranks"], r["events_per_rank"]): r for r in old.get("rows", [])}
    carried = 0
    for r in rows:
        prev = before.get((r["case"], r["ranks"], r["events_per_rank"])) if not r.get("busy_loops") else None
        for k in HTA_BACKENDS if prev else ():
            for x in ("_s", "_cpu_s", "_rss_bytes", "_note"):
                r[f"{k}{x}"] = prev.get(f"{k}{x}")
            carried += prev.get(f"{k}_s") is not None
    m = old.get("meta", {})
    if not carried:
        return {}
    if m.get("hta_from"):   # that run carried them too: the run that measured them is still the one to name
        return {"hta_from": m["hta_from"], "hta_version": m.get("hta_version"), "hta": True}
    return {"hta_from": f"HTA's figures carried from the run of {m.get('date')} (load "
                        f"{(m.get('load_before') or [0])[0]:.1f}): HTA could not run in this one",
            "hta_version": m.get("hta_version"), "hta": True}


def _mb(x):
    return "-" if x is None else f"{x / 1e6:.0f}"


def _s(x):
    return "-" if x is None else f"{x:.2f}"


def table(rows: list[dict]) -> list[str]:
    out = [f"{'case':<20}{'ranks':>6}{'events/rank':>12}{'CLI s':>7}{'cpu s':>7}{'call s':>7}{'events/s':>10}"
           f"{'exp.':>6}{'RSS MB':>7}{'json.load':>10}{'HTA s':>7}{'HTA MB':>7}{'batched':>8}{'MB':>6}{'load':>6}"]
    prev = None
    for r in rows:
        n = r["ranks"] * r["events_per_rank"]
        k = "-"
        if prev and prev["case"] == r["case"] and prev["ranks"] == r["ranks"]:
            grow = r["events_per_rank"] / prev["events_per_rank"]
            k = f"{math.log(r['cli_cpu_s'] / prev['cli_cpu_s']) / math.log(grow):.2f}"
        r["growth_exponent"] = None if k == "-" else float(k)
        hta = {k: _s(r[f"{k}_s"]) if r[f"{k}_note"] is None else "fail" for k in HTA_BACKENDS}
        out.append(f"{r['case']:<20}{r['ranks']:>6}{r['events_per_rank']:>12,}{r['cli_s']:>7.2f}{r['cli_cpu_s']:>7.2f}"
                   f"{r['call_s']:>7.2f}{n / r['cli_s']:>10,.0f}{k:>6}{_mb(r['peak_rss_bytes']):>7}"
                   f"{_s(r['json_load_s']):>10}{hta['hta']:>7}{_mb(r['hta_rss_bytes']):>7}{hta['hta_batched']:>8}"
                   f"{_mb(r['hta_batched_rss_bytes']):>6}{r['load_1min'][0]:>6.1f}")
        prev = r
    return out


def targets(rows: list[dict], cores: int) -> list[str]:
    """The issue's targets, each as measured here."""
    out = []
    gpu = [r for r in rows if r["case"] == "gpu"]
    if len(gpu) >= 2:
        b = gpu[-1]
        for x, y in zip(gpu, gpu[1:]):
            out.append(f"linear: {y['events_per_rank'] // x['events_per_rank']}x the events "
                       f"({x['events_per_rank']:,} -> {y['events_per_rank']:,}) took {y['cli_s'] / x['cli_s']:.1f}x "
                       f"the time, {y['cli_cpu_s'] / x['cli_cpu_s']:.1f}x the CPU time (target <= 12x per 10x)")
        runs = f" (median of {len(b['cli_runs_s'])})" if b.get("cli_runs_s") else ""
        out.append(f"fast: 2 x {b['events_per_rank']:,} events end to end in {b['cli_s']:.2f} s{runs}; json.load alone "
                   f"{_s(b['json_load_s'])} s"
                   + (f" (diagnose / json.load = {b['cli_s'] / b['json_load_s']:.2f}, target <= 0.25)"
                      if b["json_load_s"] else "") + f"; load {b['load_1min'][0]:.1f} to {b['load_1min'][1]:.1f}")
        for key, (backend, _) in HTA_BACKENDS.items():
            if b[f"{key}_s"]:
                out.append(f"  HTA {backend}: {b[f'{key}_s']:.2f} s ({b[f'{key}_s'] / b['cli_s']:.1f}x diagnose), "
                           f"peak {_mb(b[f'{key}_rss_bytes'])} MB")
        out.append(f"memory: peak RSS {_mb(b['peak_rss_bytes'])} MB for 2 x {b['events_per_rank']:,} events "
                   f"({b['bytes_on_disk'] / 1e6:.0f} MB of JSON)")
        loaded = next((r for r in rows if r.get("busy_loops") and r["events_per_rank"] == b["events_per_rank"]), None)
        if loaded and b["json_load_s"] and loaded["json_load_s"]:
            q, lo = b["cli_s"] / b["json_load_s"], loaded["cli_s"] / loaded["json_load_s"]
            out.append(f"under load: {loaded['busy_loops']} busy loops (1-minute load {loaded['load_1min'][0]:.1f} to "
                       f"{loaded['load_1min'][1]:.1f}, {cores} cores): diagnose / json.load = {lo:.2f} (target "
                       f"<= 0.35) against {q:.2f} quiet, {lo / q:.2f}x (target <= 1.3x); peak RSS "
                       f"{_mb(loaded['peak_rss_bytes'])} MB")
    one = next((r for r in rows if r["case"] == "one rank"), None)
    many = next((r for r in rows if r["ranks"] > 2), None)
    if many and not one:
        out.append(f"many ranks: {many['ranks']} ranks in {many['cli_s']:.2f} s, peak RSS "
                   f"{_mb(many['peak_rss_bytes'])} MB (no one-rank case here to bound it)")
    if one and many:
        bound = many["ranks"] / cores * one["cli_s"] + 1
        out.append(f"many ranks: {many['ranks']} ranks in {many['cli_s']:.2f} s, one rank {one['cli_s']:.2f} s: "
                   f"bound {many['ranks']}/{cores} cores x one + 1 s = {bound:.2f} s; peak RSS "
                   f"{_mb(many['peak_rss_bytes'])} MB vs {_mb(one['peak_rss_bytes'])} MB for one rank")
    return out


def main() -> None:
    ap = arguments.Parser(__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small sizes, no HTA, nothing written (CI)")
    ap.add_argument("--hta-python", default=None, type=interpreter,
                    help="an interpreter with holistictraceanalysis installed (default: this one, if it has it)")
    ap.add_argument("--out", default=None, type=arguments.output_file,
                    help="JSON file for the figures (full run: benchmarks/diagnose_scale.json)")
    args = ap.parse_args()
    # the full run's largest case: a 2 x 1M-event job read by diagnose (~0.6 GB) and by HTA (~2.6 GB)
    ap.check_memory(ranks=1, per_rank=(0.2 if args.quick else 3.5) * 1e9,
                    what="--quick" if args.quick else "the full run")
    cases = QUICK if args.quick else FULL
    hta_py = None if args.quick else hta_python(args.hta_python)
    out = args.out or (None if args.quick else os.path.join(ROOT, "benchmarks", "diagnose_scale.json"))
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    load_before = os.getloadavg()
    helps = [timed([sys.executable, "-m", "commlib", "diagnose", "--help"])["s"] for _ in range(1 if args.quick else 3)]
    print(f"# {platform.processor() or platform.machine()}, {cores} cores, load {load_before[0]:.1f} before; "
          f"python -m commlib diagnose --help: {min(helps):.2f} s (best of {len(helps)})")
    version = hta_version(hta_py) if hta_py else None
    print("Holistic Trace Analysis: " + (f"{version}, run with {hta_py}, both parsers" if hta_py else
          "not run (--quick)" if args.quick else "not installed here (give --hta-python PATH): column skipped"))
    rows = []
    loaded = LOADED[:4] + ((20_000 if args.quick else LOADED[4]),) + LOADED[5:]
    with tempfile.TemporaryDirectory(prefix="diagnose_scale_") as folder:
        for case, busy in [(c, 0) for c in cases] + [(loaded, BUSY)]:
            rows.append(run_case(folder, *case, hta_py, busy=busy))
            print(f"  done: {case[0]} {case[3]} x {case[4]:,} in {rows[-1]['cli_s']:.2f} s", flush=True)
    print("\n".join(table(rows)))
    print("(events/s: all ranks' events / CLI seconds; cpu s: CPU seconds of the process and its workers; exp.: "
          "growth exponent of the CLI's CPU time against the row above, 1 = linear; HTA s / batched: HTA's default "
          "and batched ijson parsers; MB: " + PEAK_NOTE + "; load: 1-minute load before the row)")
    print("\n".join(targets(rows, cores)))
    meta = {"machine": f"{platform.processor() or platform.machine()}, {cores} cores, "
                       f"{psutil.virtual_memory().total / 2**30:.0f} GiB", "python": platform.python_version(),
            "date": datetime.date.today().isoformat(), "load_before": load_before, "load_after": os.getloadavg(),
            "help_s": min(helps), "hta": hta_py is not None, "hta_version": version,
            "hta_backends": {k: what for k, (_, what) in HTA_BACKENDS.items()}, "peak_memory_note": PEAK_NOTE,
            "load_note": "1-minute load averages of the whole machine, this benchmark included; each row's "
                         "load_1min: before its CLI run and after its last tool"}
    if out and not hta_py:
        meta.update(carry_hta(rows, out))
    if out:
        with open(out, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
        print(f"wrote {out}")


if __name__ == "__main__":
    main()
