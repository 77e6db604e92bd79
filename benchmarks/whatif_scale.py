"""What-if at scale: `whatif` against `diagnose` on the same synthetic traces of a real job's shape (issue 34: the
replay of a 1M-event trace per rank takes no longer than diagnose of it).

    python benchmarks/whatif_scale.py [--quick] [--events 1000000] [--json out.json]

Traces: commlib.profiling.jobs.synthetic (Kineto's GPU format, 5% of kernels NCCL all-reduces; and a CPU/Gloo job), two
ranks, written to a temporary folder. Per case, in this process, one after the other: diagnose() from the files
(reading included), whatif() from the files with one scenario (reading, the graph, the identity replay and the
scenario's), and the replay alone on traces already read (graph.build + one replay): what whatif adds to reading.
No tool a user can pip-install replays a trace on other hardware (Holistic Trace Analysis describes traces and
stops), so the comparison is with diagnose, which every what-if runs after. --quick (CI): small sizes, no JSON.
"""

import datetime
import json
import os
import platform
import tempfile
import time

from commlib.bench import arguments
from commlib.profiling import traces
from commlib.profiling.jobs import synthetic
from commlib.profiling.replay import graph
from commlib.profiling.diagnosis import diagnose
from commlib.profiling.replay.whatif import Scenario, whatif

SCENARIO = Scenario("dgx_h100, 4 nodes x 8", topology="dgx_h100", nodes=4)


def case(folder: str, form: str, events: int) -> dict:
    paths = synthetic.write_job(folder, ranks=2, events=events, form=form)
    t = time.perf_counter()
    diagnose(paths, hardware="dgx_a100")
    t_diag = time.perf_counter() - t
    t = time.perf_counter()
    report = whatif(paths, [SCENARIO], measured="dgx_a100")
    t_whatif = time.perf_counter() - t
    ranks = traces.load(paths)
    t = time.perf_counter()
    g = graph.build(ranks)
    graph.replay(g)
    t_replay = time.perf_counter() - t
    identity = report["scenarios"][1]["step_us"] / report["scenarios"][0]["step_us"] - 1
    return {"form": form, "events_per_rank": events, "calls_per_rank": len(ranks[0].calls), "diagnose_s": t_diag,
            "whatif_s": t_whatif, "replay_s": t_replay, "replay_over_diagnose": t_replay / t_diag,
            "identity_error": identity}


def flows_case(calls: int) -> dict:
    """The flow-level replay at scale: a torch-DDP-shaped job of `calls` all-reduces per rank on 2 ranks
    (shared_nic.ddp_like: two in flight on Gloo's workers), asked one bandwidth scenario: whatif's time (the
    graph, the recorded sharing taken out of each call, the identity replay and the scenario's flows)."""
    import dataclasses

    from commlib.profiling.jobs import shared_nic

    ranks, measured = shared_nic.ddp_like(calls)
    x4 = dataclasses.replace(measured, inter=dataclasses.replace(measured.inter, bandwidth=4 * measured.inter.bandwidth))
    t = time.perf_counter()
    report = whatif(ranks, [Scenario("x4", topology=x4)], measured=measured)
    took = time.perf_counter() - t
    return {"calls": calls * len(ranks), "whatif_s": took,
            "x4_over_measured": report["scenarios"][2]["step_us"] / report["scenarios"][0]["step_us"]}


def main() -> None:
    ap = arguments.Parser(__doc__)
    ap.add_argument("--events", type=arguments.integer(1000, 10_000_000), default=1_000_000,
                    help="events per rank of the GPU case (the CPU case gets a tenth)")
    ap.add_argument("--json", type=arguments.output_file, help="also write the result to this file")
    ap.add_argument("--quick", action="store_true", help="a smoke run for CI: 20,000 events per rank")
    a = ap.parse_args()
    events = 20_000 if a.quick else a.events
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for form, n in (("gpu", events), ("cpu", max(1000, events // 10))):
            rows.append(case(os.path.join(tmp, form), form, n))
    load = os.getloadavg()
    print(f"# {platform.machine()}, {os.cpu_count()} CPUs, load {load[0]:.2f} (1 min); 2 ranks; "
          f"scenario: {SCENARIO.label()}")
    print(f"{'form':>5} {'events/rank':>12} {'calls/rank':>11} {'diagnose s':>11} {'whatif s':>9} {'replay s':>9} "
          f"{'replay/diagnose':>16} {'identity':>9}")
    for r in rows:
        print(f"{r['form']:>5} {r['events_per_rank']:>12,} {r['calls_per_rank']:>11,} {r['diagnose_s']:>11.2f} "
              f"{r['whatif_s']:>9.2f} {r['replay_s']:>9.3f} {r['replay_over_diagnose']:>16.3f} "
              f"{r['identity_error']:>+9.1e}")
    worst = max(r["replay_over_diagnose"] for r in rows)
    print(f"replay / diagnose, worst case: {worst:.3f} (the issue's bound: 1)")
    flow = flows_case(1_000 if a.quick else 50_000)
    print(f"flows: {flow['calls']:,} all-reduces (2 ranks, two in flight), whatif with one bandwidth scenario "
          f"in {flow['whatif_s']:.2f} s (the issue's bound: a few seconds at 10^5 calls)")
    if a.json:
        with open(a.json, "w") as f:
            json.dump({"rows": rows, "flows": flow, "machine": platform.machine(), "cpus": os.cpu_count(), "load": load,
                       "date": datetime.date.today().isoformat(),
                       "command": f"python benchmarks/whatif_scale.py --events {events}"}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
