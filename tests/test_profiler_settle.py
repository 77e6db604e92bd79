"""live.settle: before the profiler stops, Gloo's worker threads have finished every call they ran (torch 2.13
completes a call's future before the thread records its end, and a stop meanwhile corrupted the heap), and the
trace holds no trace of the wait (no barrier, and the step's span closed before it), and no warning is printed."""

import json
import sys

import cloudpickle

import commlib as cl

cloudpickle.register_pickle_by_value(sys.modules[__name__])


def _settled(path):
    """In a rank: torch DDP whose hook's call keeps rank 0's worker thread in a callback after DDP's wait returned
    (as a descheduled thread would) in the profiled step: the callback waits until settle's barrier is called, then
    0.3 s more; settle before the profiler stops -> (how many calls' callbacks had ended by then, the trace's event
    names, its ProfilerStep spans' seconds, the seconds settle's barrier waited)."""
    import threading
    import time

    import torch
    import torch.distributed as dist
    from torch.profiler import ProfilerActivity, profile, schedule

    from commlib.profiling.jobs.live import settle

    torch.set_num_threads(1)
    rank = dist.get_rank()
    done, entered, hold, waited = [], threading.Event(), [], []
    turn = dist.new_group(backend="gloo")
    barrier = dist.barrier

    def timed_barrier(*args, **kwargs):   # what settle calls: lets the held callback go on, and times the wait
        t0 = time.perf_counter()
        entered.set()
        barrier(*args, **kwargs)
        waited.append(time.perf_counter() - t0)

    def late(f):
        if hold and rank == 0:            # the profiled step's call: its thread ends after the barrier began
            entered.wait(timeout=5)       # (without settle's barrier: 5 s, and its end is late for the count)
            time.sleep(0.3)
        done.append(1)

    def hook(state, bucket):
        # rank 1 starts its call once rank 0 has added its callbacks: rank 0's call cannot have completed by then,
        # so its callbacks run on its worker thread (one added to a completed future runs at once, on this thread)
        if rank == 1:
            dist.recv(torch.zeros(1), 0, group=turn)
        fut = dist.all_reduce(bucket.buffer(), async_op=True).get_future()
        child = fut.then(lambda f: f.value()[0])             # DDP waits on this one
        fut.add_done_callback(late)                          # runs after it
        if rank == 0:
            dist.send(torch.zeros(1), 1, group=turn)
        return child

    model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64))
    model.register_comm_hook(None, hook)
    x = torch.randn(4, 64)
    model(x).sum().backward()
    dist.barrier()                        # the warm-up's callback ended: the profiled step does not wait for it
    dist.barrier = timed_barrier
    hold.append(1)
    try:
        with profile(activities=[ProfilerActivity.CPU], schedule=schedule(wait=0, warmup=0, active=1, repeat=1),
                     on_trace_ready=lambda p: p.export_chrome_trace(path.format(rank=dist.get_rank()))) as prof:
            model(x).sum().backward()
            settle(prof)
            settled = len(done)   # the warm-up's call and this one: both callbacks ended
            prof.step()
    finally:
        dist.barrier = barrier
    with open(path.format(rank=dist.get_rank())) as f:
        events = json.load(f)["traceEvents"]
    steps = [e["dur"] * 1e-6 for e in events if e.get("name", "").startswith("ProfilerStep")]
    return settled, {e.get("name", "") for e in events}, steps, waited


def test_settle_waits_for_the_worker_threads_and_leaves_nothing_in_the_trace(tmp_path, capfd):
    with cl.Cluster(world_size=2, timeout=60) as c:
        results = c.run(_settled, str(tmp_path / "rank{rank}.json"))
    for settled, names, steps, _ in results:
        assert settled == 2, f"settle returned with {settled} of the 2 calls' callbacks ended"
        assert "gloo:all_reduce" in names and not any("barrier" in n for n in names), sorted(names)
        assert len(steps) == 1, steps
    # rank 0's barrier waited for its callback: 0.3 s after the barrier began, at least; the step's span closed
    # before the barrier, where a span that held it would be longer than that wait
    _, _, steps, waited = results[0]
    assert len(waited) == 1 and waited[0] >= 0.3 and steps[0] < waited[0], (steps, waited)
    out, err = capfd.readouterr()
    assert "Toggling" not in out + err, err
