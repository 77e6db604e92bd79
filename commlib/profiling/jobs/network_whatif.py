"""What-if on the emulated cluster: `python -m commlib whatif --measured-network/--network` (its flags, checked
here), and the loop that checks it: record a script under `network run`, ask whatif, run the scenario, compare.

    report = ask("traces/", "4x1@80e6")                          # the CLI's code path -> its --json report
    loop = record_predict_run("examples/ddp_train.py", "2x1@20e6", "2x1@60e6", "/tmp/w")   # predicted vs measured

The measured network: --measured-network, else the one the traces name (their "commlib_network", which
`network run` puts in each rank's environment and spec.record writes into the trace). A --measured-network that
differs from the traces' own is refused, not obeyed: the traces know what they ran on, and a typo would silently
shift every prediction. Both networks are priced by commlib.network.links (the links fitted as
benchmarks/whatif_accuracy.py fits them).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

from commlib.network import links, spec
from commlib.profiling.model import traced_network
from commlib.ui.language import tr  # the notebook's language (English: as is)

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
EXAMPLE = os.path.join(ROOT, "examples", "ddp_train.py")   # the script a learner edits (torch DDP, profiled)
TP_EXAMPLE = os.path.join(ROOT, "examples", "tp_train.py")   # a Megatron-style MLP: no data parallelism
ROLES = {"gradients": "gradients once a step (data parallelism)",   # compute.roles' kinds, as the loop says them
         "activations": "activations through every layer, forward and backward (tensor parallelism)",
         "unknown": "all-reduces whose data the traces do not show (neither kind)"}
RECORD_TRIES = 3   # recordings of the base at most, where whatif finds one slowed (slowed())
COMMITTED = os.path.join(ROOT, "benchmarks", "network_run_whatif.json")   # the loop on both examples, measured
PROMPT = ".venv/bin/python -m commlib"   # the commands as a learner types them in the course's folder (a Debian
                                         # user has python3, not python; the course's environment is .venv)


def check_flags(args) -> None:
    """argparse's whatif flags: the networks parsed (args.network, args.measured_network become Specs) and the
    combinations that contradict each other refused -> ValueError, one line naming the flag."""
    for flag in ("measured_network", "network"):
        text, name = getattr(args, flag), "--" + flag.replace("_", "-")
        if text is None or isinstance(text, spec.Spec):
            continue
        setattr(args, flag, spec.parse(text, name))   # refuses what a Network refuses (spec.checked)
    if args.network is not None:
        clash = [f for f, v in (("--hardware", args.hardware), ("--nodes", args.nodes),
                                ("--gpus-per-node", args.gpus_per_node)) if v is not None]
        if clash:
            raise ValueError(f"--network gives the new job's links and shape: leave out {' and '.join(clash)}")
    elif args.hardware is None:
        raise ValueError("give the machine to replay the job on: --hardware PRESET, or --network "
                         "NODESxGPUS[xNICS]@BYTES_PER_S")
    if args.measured_network is not None and args.measured_on is not None:
        raise ValueError("--measured-on and --measured-network both say what the traces ran on: give one")


def measured_and_scenario(args, ranks):
    """(measured: a Topology or args.measured_on, the --network Scenario or None) for checked args."""
    from commlib.profiling.replay.whatif import Scenario

    own = traced_network(ranks)
    given = args.measured_network
    if given is not None and own is not None and given != own:
        raise ValueError(f"--measured-network {given} is not the network the traces say they ran on ({own}, "
                         "their commlib_network): leave --measured-network out")
    m_spec = None if args.measured_on is not None else given or own
    world = ranks[0].world_size or len(ranks)
    if m_spec is not None and m_spec.world_size != world:
        raise ValueError(f"--measured-network {m_spec} has {m_spec.world_size} ranks; the traces are of a "
                         f"{world}-rank job")
    if m_spec is None and args.measured_on is None and args.network is not None:
        raise ValueError("the traces do not say which emulated network they ran on (no commlib_network in them): "
                         "give --measured-network NODESxGPUS[xNICS]@BYTES_PER_S")
    measured = links.topology(m_spec) if m_spec is not None else args.measured_on
    args.excess = links.excess(m_spec) if m_spec is not None else "fixed"   # what whatif does with the excess
    here = m_spec is not None and getattr(args, "hardware", None) is None   # the scenario on this network too
    args.small = links.small(m_spec) if here else None   # what a small call takes there
    args.notice = links.notice(m_spec) if here else None   # commlib's ring: a step's wait
    args.credit = links.credit(m_spec) if here else None   # Gloo's ring with a NIC per GPU: streamed
    new = args.network
    if new is None:
        return measured, None
    shape = m_spec is None or (new.nodes, new.gpus_per_node) != (m_spec.nodes, m_spec.gpus_per_node)
    return measured, Scenario(f"network {new}", topology=links.topology(new), nodes=new.nodes if shape else None,
                              gpus_per_node=new.gpus_per_node if shape else None, algorithm=args.algorithm,
                              bucket_mb=args.bucket_mb, compress=args.compress,
                              this_machine=bool(getattr(args, "this_machine", False)))


# ------------------------------------------------------------------------------------------- the loop
def ask(folder: str, network: str, measured: str | None = None, timeout: float = 120.0,
        this_machine: bool = False) -> dict:
    """`python -m commlib whatif FOLDER --network NETWORK [--measured-network M] [--this-machine] --json` -> its
    JSON report; ValueError with the command's one line where it refused."""
    argv = ["whatif", folder, "--network", network, "--json"] + (["--measured-network", measured] if measured else [])
    argv += ["--this-machine"] if this_machine else []
    done = _commlib(argv, timeout)
    if done.returncode:
        raise ValueError(done.stderr.strip() or f"whatif exited {done.returncode}")
    return json.loads(done.stdout)


def _commlib(argv: list, timeout: float) -> subprocess.CompletedProcess:
    """python -m commlib ARGV with this checkout's commlib first on the path."""
    env = os.environ | {"PYTHONPATH": os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)}
    return subprocess.run([sys.executable, "-m", "commlib", *argv], capture_output=True, text=True, env=env,
                          timeout=timeout)


def run(script: str, network: str, folder: str, args=(), timeout: float = 120.0) -> subprocess.CompletedProcess:
    """`python -m commlib network run --timeout T ... SCRIPT --traces FOLDER ARGS` -> the finished process
    (returncode, stdout, stderr: text)."""
    s = spec.parse(network)
    return _commlib(["network", "run", "--nodes", str(s.nodes), "--gpus-per-node", str(s.gpus_per_node),
                     "--nics-per-node", str(s.nics_per_node), "--bandwidth", repr(s.bandwidth), "--timeout",
                     f"{timeout:g}", script, "--traces", folder, *map(str, args)], timeout + 30)


def record(script: str, network: str, folder: str, args=(), timeout: float = 120.0, read=None,
           tries: int = 1) -> tuple[dict | None, int]:
    """run() SCRIPT on `network` into folder (RuntimeError naming the exit status and the last line of stderr where
    it failed) -> (read(folder), the runs made): read (folder -> whatif's report on the run) made again while the
    report finds the run slowed (slowed()), `tries` runs at most; (None, 1) without read."""
    for made in range(1, max(1, tries) + 1):
        done = run(script, network, folder, args, timeout)
        if done.returncode:
            tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
            raise RuntimeError(f"network run on {network} exited {done.returncode}: {tail}")
        report = read(folder) if read is not None else None
        if report is None or not slowed(report):
            break
    return report, made


def measured(traces, untraced: bool = False) -> tuple[float, float]:
    """A run's traces (a folder, files or RankTraces: whatif's) -> (step, CPU) in seconds per step. The step:
    whatif's "measured" row, the slowest rank's traced step averaged over the steps; with `untraced`, the job's
    step without the profiler where the traces carry it (commlib_untraced: the steps the recipe times before it
    records, the slowest rank per step, the median). The CPU: that rank's time on the CPU in the traced steps,
    its compute spans and the gaps between them that waited for no call (idle: Python, the optimizer's glue),
    which the replay keeps as they were recorded."""
    from commlib.profiling.replay.whatif import whatif

    return run_steps(whatif(traces, []), untraced)


def run_steps(report: dict, untraced: bool = False) -> tuple[float, float]:
    """measured() from whatif's report on a run's traces (no scenario), for a caller that has it already."""
    row, k = report["scenarios"][0], report.get("steps", 1)
    slow = max(row["ranks"].values(), key=lambda o: o["step_us"])
    step = (report.get("profiler") or {}).get("untraced_us", row["step_us"]) if untraced else row["step_us"]
    return step * 1e-6, (slow["compute_us"] + slow["idle_us"]) / k * 1e-6


def corrected(report: dict) -> bool:
    """Whether whatif took the profiler's time out of its prediction (its compute scaled to the recording's
    untraced step): the prediction is then of the job without the profiler, and is compared with the run's
    untraced steps; else of the job as traced, compared with the run's traced steps (like with like)."""
    return (report.get("profiler") or {}).get("compute_factor", 1.0) != 1.0


def slowed(report: dict) -> bool:
    """Whether whatif found the recording slowed beyond what it can take out: its traced steps over its untraced
    ones by more than the noise, and no compute factor down to compute.floor (what the profiler adds to the ops it
    recorded) explains it (a host busy while it recorded: compute, gaps and calls all slower). The loop then
    records again."""
    p = report.get("profiler") or {}
    return p.get("compute_factor") == 1.0 and p.get("ratio", 1.0) > 1 + p.get("noise", 0.0)


def record_predict_run(script: str, base: str, scenario: str, folder: str, args=(), timeout: float = 120.0,
                       this_machine: bool = False, tries: int = RECORD_TRIES) -> dict:
    """Record SCRIPT on network `base`, ask whatif for `scenario`, run it there -> {"base", "scenario",
    "measured_base_s", "predicted_s", "measured_s", "error" (predicted / measured - 1), "cpu_base_s", "cpu_s"
    (the CPU per step of each run: measured(); the replay keeps the first), "commands" (as typed),
    "compute_factor", "traced_vs_untraced" (whatif's profiler correction: None where the traces carry no untraced
    step), "untraced" (whether the steps compared are the untraced ones: corrected()), "group_roles" (what whatif
    read each all-reducing group as doing: compute.roles), "recordings"}.
    this_machine: whatif --this-machine, the prediction for the ranks sharing this machine's cores (what the run
    measures) rather than for a real cluster. A recording whatif finds slowed (slowed()) is made again, `tries`
    recordings at most, as a learner would on reading its profiler line ("recordings": how many were made; the
    last is kept). In a check on four jobs whatif had never seen (issue 64), its two misses over 35% came from two
    such recordings, whose traced steps ran x1.27 and x1.37 their untraced ones."""
    steps, cpu, commands = {}, {}, []
    for name, net in (("base", base), ("scenario", scenario)):
        where = os.path.join(folder, name)
        s = spec.parse(net)
        commands.append(f"{PROMPT} network run --nodes {s.nodes} --gpus-per-node {s.gpus_per_node} "
                        f"--bandwidth {net.split('@')[1]} {os.path.relpath(script, ROOT)} --traces {name}/"
                        + "".join(f" {x}" for x in args))
        if name == "base":   # whatif's report on the base holds its own steps: measured() from it, not again
            report, made = record(script, net, where, args, timeout, tries=tries,
                                  read=lambda w: ask(w, scenario, timeout=timeout, this_machine=this_machine))
            commands.append(f"{PROMPT} whatif base/ --network {scenario}" + (" --this-machine" if this_machine else ""))
            steps[name], cpu[name] = run_steps(report, untraced=corrected(report))
        else:
            record(script, net, where, args, timeout)
            steps[name], cpu[name] = measured(where, untraced=corrected(report))
    predicted = report["scenarios"][-1]["step_us"] * 1e-6
    prof = report.get("profiler") or {}   # the base run's untraced step, where its traces carry it
    return {"base": base, "scenario": scenario, "measured_base_s": steps["base"], "predicted_s": predicted,
            "measured_s": steps["scenario"], "error": predicted / steps["scenario"] - 1, "cpu_base_s": cpu["base"],
            "cpu_s": cpu["scenario"], "commands": commands, "compute_factor": prof.get("compute_factor"),
            "traced_vs_untraced": prof.get("ratio"), "untraced": corrected(report),
            "group_roles": report.get("group_roles") or {}, "recordings": made}


def roles(loop: dict) -> str:
    """What whatif read each all-reducing group of the recorded job as carrying, in words (ROLES), one line."""
    said = [tr(f"group {name} carries {tr(ROLES.get(kind, kind))}") for name, kind in
            sorted(loop.get("group_roles", {}).items())]
    return tr(f"whatif read the traces: {'; '.join(said)}") if said else tr("whatif read no group that all-reduces")


def verdict(loop: dict, tolerance: float = 0.10) -> str:
    """Predicted against measured, and whether they agree within `tolerance`; then, where the loop has them, the
    CPU per step of both runs: the replay keeps the base run's, so a CPU that ran the same ops faster or slower
    in the scenario's run moves the step by that much, which no network model can see; where whatif scaled the
    recorded compute to the untraced steps (the profiler's time), by how much."""
    ok = abs(loop["error"]) <= tolerance
    out = tr(f"{loop['base']} -> {loop['scenario']}: whatif predicted {loop['predicted_s'] * 1e3:.1f} ms per step,\n"
             f"the run measured {loop['measured_s'] * 1e3:.1f} ms ({loop['error']:+.0%}): "
             + (f"within {tolerance:.0%}" if ok else f"off by more than {tolerance:.0%}"))
    f = loop.get("compute_factor")
    if f is not None and f != 1 and loop.get("traced_vs_untraced"):
        out += "\n" + tr(f"the replay's compute x{f:.3f}: the recorded steps ran x{loop['traced_vs_untraced']:.2f} "
                         "their untraced time (the profiler's own),\nso both runs are measured without it")
    if loop.get("recordings", 1) > 1:
        out += "\n" + tr(f"recorded {loop['recordings']} times: whatif found the earlier recording(s) slowed "
                          "beyond\nthe profiler's own time (a busy host)")
    if loop.get("cpu_base_s") is None or loop.get("cpu_s") is None:
        return out
    kept, ran = loop["cpu_base_s"] * 1e3, loop["cpu_s"] * 1e3
    return out + "\n" + tr(f"CPU per step (ops and the gaps between them): {kept:.1f} ms recorded on {loop['base']},"
                            f" kept by the\nreplay; {ran:.1f} ms in the run on {loop['scenario']} "
                            f"({ran - kept:+.1f} ms, {(ran - kept) / (loop['measured_s'] * 1e3):+.0%} of its step)")


# ------------------------------------------------------------------------------- the committed loop
def committed(path: str = COMMITTED) -> dict:
    """benchmarks/network_run_whatif.json (the loop on each example script, run by its benchmark) -> the run;
    ValueError naming the file where it is not one (a bounded read: it is data)."""
    try:
        with open(path, "rb") as f:
            run = json.loads(f.read(1 << 20))
        if not isinstance(run, dict) or not isinstance(run.get("jobs"), list):
            raise ValueError("no list of jobs")
        return run
    except (OSError, ValueError) as e:
        raise ValueError(f"{path}: not a run of benchmarks/network_run_whatif.py ({e})") from None


def committed_table(run: dict) -> str:
    """The committed loop, job by job: its script and what whatif read its groups as, then the base and each
    scenario, predicted against measured (the mean of two runs), the step over the base's, the error and the noise
    (the two runs apart); then where and how it ran. At most 100 display columns (columns.fit, ui.wrap.fill: a
    Chinese character takes two)."""
    from commlib import columns
    from commlib.ui.wrap import fill

    pct = lambda x: "-" if x is None else f"{x:.1%}"   # noqa: E731
    rows, where = [[tr(h) for h in ("scenario", "network", "predicted ms", "measured ms", "x base", "error",
                                    "noise")]], []
    for job in run["jobs"]:
        base = sum(job["base_runs_s"]) / len(job["base_runs_s"])
        where.append(len(rows))
        rows.append([tr("base"), job["base"], "", f"{base * 1e3:.1f}", "1.00", "", pct(job["base_noise"])])
        rows += [[tr(r["scenario"]), r["network"], f"{r['predicted_s'] * 1e3:.1f}", f"{r['measured_s'] * 1e3:.1f}",
                  f"{r['measured_s'] / base:.2f}", f"{r['error']:+.1%}", pct(r["noise"])] for r in job["rows"]]
    lines = [line.rstrip() for line in columns.fit(rows, [16, 10, 13, 12, 7, 7, 7], "<<>>>>>", 100)]
    out = lines[:1]
    for k, job in enumerate(run["jobs"]):
        out.append(fill(f"{job['script']}: " + roles(job), 100, "    "))
        out += lines[where[k]:where[k + 1] if k + 1 < len(where) else len(lines)]
    out.append(fill(tr(f"measured by benchmarks/network_run_whatif.py: {run['machine']}, {run['cpus']} CPUs, load "
                       f"{run['load'][0]:.2f} -> {run['load'][1]:.2f}, {run['steps']} steps a run, every network "
                       "run twice (noise: the two runs apart)"), 100, "    "))
    return "\n".join(out)
