"""`whatif --network` against the runs it predicts (issue 50's done-when): the course's example scripts on the kernel
network, a data-parallel one and one that is not (issue 64, item 7).

    python benchmarks/network_run_whatif.py [--bandwidth 20e6] [--steps 5] [--json benchmarks/network_run_whatif.json]
    python benchmarks/network_run_whatif.py --quick        # CI: one base run, one scenario run, no noise floor

For each script, examples/ddp_train.py (torch DDP, Gloo) and examples/tp_train.py (a Megatron-style
tensor-parallel MLP: no data parallelism, small all-reduces of activations in every layer):
1. Record it with `python -m commlib network run` on 2 nodes x 1 GPU at --bandwidth (its traces name the network:
   commlib_network).
2. Ask `python -m commlib whatif TRACES --network N --json` (the command line itself, no --measured-network: the
   traces say it) for x1/2 and x3 the bandwidth, and for the DDP job 2 -> 4 nodes, on each recording of the base:
   the prediction is their mean (predicted_runs_s: each one's; they differ by what each recording's CPU did); a
   recording whatif finds slowed (a busy host: nw.slowed) is made again, as the loop does (recordings). The
   tensor-parallel job is not asked for 4 nodes: the script splits its fixed model over every rank, and the replay
   keeps each rank's shard (it says so), so that row would measure a different job.
3. Run each scenario under `network run` and measure its step as the prediction is of: where whatif took the
   profiler's time out (its compute scaled to the recording's untraced steps), the steps the recipe timed
   without the profiler (the traces' commlib_untraced); else the traced ones, as whatif measures the base (the
   slowest rank per step, averaged over the recorded steps). Like with like, per recording (like_with_like).
Each measured network (the base too) runs twice: the two runs' difference is the noise floor. Prints, per script,
what whatif read each group as carrying (its report's group_roles), then predicted, measured (the mean of the
runs), the error and the noise, the CPU per step (measured(): the slowest rank's compute and the gaps between
it, which the replay keeps from the base run) of the base and of each scenario, and the load at start and end.
The goal: every error within 10%. --quick: the DDP script's base and x3 once each, 2 steps (~30 s). Where the
kernel network cannot be built (not root), it says so in one line and measures nothing.
"""

import json
import os
import platform
import statistics
import tempfile
import time

from commlib.bench import arguments
from commlib.profiling.jobs import network_whatif as nw

SCRIPTS = {"ddp_train": nw.EXAMPLE, "tp_train": nw.TP_EXAMPLE}   # --quick: the first only
GOAL = 0.10


def mb(bandwidth: float) -> str:
    """20000000.0 -> '20e6': the network as a learner types it."""
    return f"{bandwidth / 1e6:g}e6"


def scenarios(bandwidth: float, quick: bool, job: str = "ddp_train") -> dict:
    """name -> network: the done-when's three questions (--quick: x3 only; the tensor-parallel job: not 4 nodes,
    see the module docstring)."""
    out = {"x1/2 bandwidth": f"2x1@{mb(bandwidth / 2)}", "x3 bandwidth": f"2x1@{mb(bandwidth * 3)}"}
    if job == "ddp_train":
        out["2 -> 4 nodes"] = f"4x1@{mb(bandwidth)}"
    return {"x3 bandwidth": out["x3 bandwidth"]} if quick else out


def steps_of(script: str, network: str, folder: str, runs: int, steps: int, recording: bool = False) -> list[dict]:
    """Run the script `runs` times on `network` -> each run's {"traced", "untraced" (its step with and without the
    profiler), "cpu" (per step), "recordings"}, seconds (nw.run_steps). recording: a run whatif will replay, made
    again where whatif finds it slowed, as the loop does (nw.slowed, nw.RECORD_TRIES)."""
    from commlib.profiling.replay.whatif import whatif

    out = []
    for i in range(runs):
        where = os.path.join(folder, f"{network}-{i}")
        try:   # whatif on the run's own steps: once, for slowed() and both measurements
            report, made = nw.record(script, network, where, ["--steps", steps], 180, read=lambda w: whatif(w, []),
                                     tries=nw.RECORD_TRIES if recording else 1)
        except RuntimeError as e:
            raise SystemExit(str(e)) from None
        (traced, cpu), (untraced, _) = nw.run_steps(report), nw.run_steps(report, untraced=True)
        out.append({"traced": traced, "untraced": untraced, "cpu": cpu, "recordings": made})
    return out


def like_with_like(runs: list[dict], reports: list[dict]) -> list[float]:
    """Each run's step as each recording's prediction is of (nw.corrected: untraced where whatif took the
    profiler out, traced where it did not), the mean over the recordings -> one step per run."""
    kinds = ["untraced" if nw.corrected(r) else "traced" for r in reports]
    return [statistics.mean(run[k] for k in kinds) for run in runs]


def measure(bandwidth: float, steps: int, quick: bool, folder: str, job: str = "ddp_train") -> dict:
    runs = 1 if quick else 2
    script, folder = SCRIPTS[job], os.path.join(folder, job)
    base = f"2x1@{mb(bandwidth)}"
    base_runs = steps_of(script, base, folder, runs, steps, recording=True)
    rows = []
    for name, network in scenarios(bandwidth, quick, job).items():
        # whatif on each recording of the base (their CPU is what each keeps): the prediction is their mean
        reports = [nw.ask(os.path.join(folder, f"{base}-{i}"), network) for i in range(runs)]
        each = [r["scenarios"][-1]["step_us"] * 1e-6 for r in reports]
        predicted = statistics.mean(each)
        ran = steps_of(script, network, folder, runs, steps)
        got = like_with_like(ran, reports)
        mean = statistics.mean(got)
        rows.append({"scenario": name, "network": network, "predicted_s": predicted, "predicted_runs_s": each,
                     "measured_s": mean, "runs_s": got, "error": predicted / mean - 1,
                     "noise": abs(got[1] / got[0] - 1) if len(got) > 1 else None,
                     "cpu_s": statistics.mean(x["cpu"] for x in ran),
                     "untraced": [nw.corrected(r) for r in reports]})
    base_steps = like_with_like(base_runs, reports)
    return {"job": job, "script": os.path.relpath(script, nw.ROOT), "base": base, "base_runs_s": base_steps,
            "base_cpu_s": statistics.mean(x["cpu"] for x in base_runs),
            "base_noise": abs(base_steps[1] / base_steps[0] - 1) if len(base_steps) > 1 else None, "rows": rows,
            "recordings": [x["recordings"] for x in base_runs],
            "measured_on": reports[0]["measured_on"], "group_roles": reports[0].get("group_roles") or {},
            "compute_factor": [(r.get("profiler") or {}).get("compute_factor") for r in reports]}


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--bandwidth", type=arguments.number(1e5, 1e9), default=20e6,
                    help="the base network's NIC, bytes/s (default 20e6)")
    ap.add_argument("--steps", type=arguments.integer(1, 100), default=20,
                    help="recorded steps per run (default 20)")
    ap.add_argument("--json", type=arguments.output_file, help="also write the result to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: the base and x3 once, 2 steps")
    a = ap.parse_args()
    steps = 2 if a.quick else a.steps
    from commlib.network import available

    t0, load = time.perf_counter(), os.getloadavg()[0]
    ok, why = available()
    print(f"{'scenario':>15} {'network':>12} {'predicted ms':>13} {'measured ms':>12} {'error':>7} {'noise':>6} "
          f"{'CPU ms':>7}")
    if not ok:
        print(f"kernel network: not available here ({why}): nothing measured")
        print("every error within 10%: not measured")
        return
    with tempfile.TemporaryDirectory() as tmp:
        jobs = [measure(a.bandwidth, steps, a.quick, tmp, job) for job in (list(SCRIPTS)[:1] if a.quick else SCRIPTS)]
    end = os.getloadavg()[0]
    for result in jobs:
        roles = "; ".join(f"group {g}: {k}" for g, k in sorted(result["group_roles"].items())) or "none"
        print(f"# {result['script']}: whatif read {roles}")
        base = result["base_runs_s"]
        noise = f"{result['base_noise']:>6.1%}" if result["base_noise"] is not None else f"{'-':>6}"
        print(f"{'base':>15} {result['base']:>12} {'':>13} {statistics.mean(base) * 1e3:>12.1f} {'':>7} {noise} "
              f"{result['base_cpu_s'] * 1e3:>7.2f}")
        for r in result["rows"]:
            noise = f"{r['noise']:>6.1%}" if r["noise"] is not None else f"{'-':>6}"
            print(f"{r['scenario']:>15} {r['network']:>12} {r['predicted_s'] * 1e3:>13.1f} "
                  f"{r['measured_s'] * 1e3:>12.1f} {r['error']:>+7.1%} {noise} {r['cpu_s'] * 1e3:>7.2f}")
    print("CPU ms: the slowest rank's compute and the gaps between it, per step; the replay keeps the base's")
    worst = max(abs(r["error"]) for result in jobs for r in result["rows"])
    print(f"every error within {GOAL:.0%}: {'yes' if worst <= GOAL else 'no'} (worst {worst:.1%}); "
          f"{platform.machine()}, {os.cpu_count()} CPUs, load {load:.2f} -> {end:.2f}, {steps} steps per run, "
          f"{time.perf_counter() - t0:.0f} s")
    if a.json:
        out = {"jobs": jobs, "worst_error": worst, "goal": GOAL, "steps": steps, "bandwidth": a.bandwidth,
               "load": [load, end], "cpus": os.cpu_count(), "machine": platform.machine(),
               "seconds": time.perf_counter() - t0,
               "command": f"python benchmarks/network_run_whatif.py --bandwidth {a.bandwidth:g} "
                          f"--steps {a.steps}" + (" --quick" if a.quick else "")}
        with open(a.json, "w") as f:
            json.dump(out, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
