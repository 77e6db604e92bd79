"""live.settle: before the profiler stops, Gloo's worker threads have finished every call they ran (torch 2.13
completes a call's future before the thread records its end, and a stop meanwhile corrupted the heap), and the
trace holds no trace of the wait (no barrier, and the step's span closed before it), and no warning is printed."""

import json
import sys

import cloudpickle

import commlib as cl

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _settled(path):
    """In a rank: torch DDP whose hook's call keeps its worker thread 0.3 s in a callback after DDP's wait returned
    (as a descheduled thread would); settle before the profiler stops -> (how many calls' callbacks had ended by
    then, the trace's event names, its ProfilerStep spans' seconds)."""
    import time

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    from commlib.profiling.jobs.live import settle

    torch.set_num_threads(1)
    done = []

    def hook(state, bucket):
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        child = fut.then(lambda f: f.value()[0])             # DDP waits on this one
        fut.add_done_callback(lambda f: (time.sleep(0.3), done.append(1)))   # runs after, on the worker thread
        return child

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    model.register_comm_hook(None, hook)
    x = torch.randn(4, 64)
    model(x).sum().backward()
    with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
                 on_trace_ready=lambda p: p.export_chrome_trace(path.format(rank=dist.get_rank()))) as prof:
        model(x).sum().backward()
        settle(prof)
        settled = len(done)   # the warm-up's call and this one: both callbacks ended
        prof.step()
    with open(path.format(rank=dist.get_rank())) as f:
        events = json.load(f)["traceEvents"]
    steps = [e["dur"] * 1e-6 for e in events if e.get("name", "").startswith("ProfilerStep")]
    return settled, {e.get("name", "") for e in events}, steps


def test_settle_waits_for_the_worker_threads_and_leaves_nothing_in_the_trace(tmp_path, capfd):
    with cl.Cluster(world_size=2, timeout=60) as c:
        results = c.run(_settled, str(tmp_path / "rank{rank}.json"))
    for settled, names, steps in results:
        assert settled == 2, f"settle returned with {settled} of the 2 calls' callbacks ended"
        assert "gloo:all_reduce" in names and not any("barrier" in n for n in names), sorted(names)
        # the step's span closed before the wait: not the 0.3 s the barrier waited for the callback
        assert len(steps) == 1 and steps[0] < 0.3, steps
    out, err = capfd.readouterr()
    assert "Toggling" not in out + err, err
