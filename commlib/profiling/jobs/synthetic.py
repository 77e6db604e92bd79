"""Synthetic per-rank torch.profiler traces of a real job's shape, for timing the reader at any size.

    paths = write_job(folder, ranks=2, events=100_000, form="gpu")   # -> [folder/rank0.json, ...]

form="gpu": Kineto's GPU format as torch >= 2.3 writes it: every kernel comes with its CPU op (aten::*), its
cudaLaunchKernel (same `correlation`), two flow events (ac2g) and, now and then, a memcpy or memset; about 1 in
20 kernels is an NCCL all-reduce (ncclDevKernel_*), with the collective's arguments on the kernel (kernel_args=
True) or only on the `record_param_comms` op around its launch (torch < 2.2). form="cpu": a Gloo job: CPU ops
on the main thread, a c10d::allreduce_ every 20 ops and its gloo:all_reduce on Gloo's worker thread.
No "Ev Idx" (Holistic Trace Analysis 0.5.0 fails past 32767 of them: an int16 column). Deterministic (a fixed
random.Random per rank); written in chunks, so a million events never sit in memory.
"""

from __future__ import annotations

import gzip
import json
import os
import random

NCCL_EVERY = 20       # 1 kernel in 20 (5%) is NCCL's
KERNEL = "void at::native::vectorized_elementwise_kernel<4, at::native::FillFunctor<float>, std::array<char*, 1ul> >" \
         "(int, at::native::FillFunctor<float>, std::array<char*, 1ul>)"
NCCL_KERNEL = "ncclDevKernel_AllReduce_Sum_f32_RING_LL(ncclDevKernelArgsStorage<4096ul>)"
CHUNK = 20_000        # events written per json.dumps call


def _header(rank: int, ranks: int, form: str) -> dict:
    info = {"backend": "nccl" if form == "gpu" else "gloo", "rank": rank, "world_size": ranks, "pg_count": 1,
            "pg_config": [{"pg_name": "0", "pg_desc": "default_pg", "backend_config": "cuda:nccl", "pg_size": ranks,
                           "ranks": list(range(ranks))}]}
    head = {"schemaVersion": 1, "distributedInfo": info}
    if form == "gpu":
        info["nccl_version"] = "2.21.5"
        head = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H100 80GB HBM3",
                                                         "totalGlobalMem": 85045870592, "numSms": 132}],
                "distributedInfo": info}
    return head


def _gpu_events(rng: random.Random, n: int, kernel_args: bool, late_us: float, ranks: int):
    """~n events: per kernel 5 (cpu op, launch, kernel, 2 flows), plus a record_param_comms op before NCCL's."""
    # ids start where a real job's are after start-up (the A100 trace's first is 57541): HTA 0.5.0 stores row
    # indices in the correlation column's dtype, int16 when every id is below 32768, and fails past 32767 rows
    t, gpu_t, corr, ext, made = 1_000_000.0, 1_000_050.0, 60_000, 12_000, 0
    while made < n:
        nccl = corr % NCCL_EVERY == 0
        dur_cpu = 8.0 + rng.random() * 4
        if nccl:
            nelems = 1 << rng.randrange(16, 24)
            comm_args = {"Collective name": "allreduce", "In msg nelems": nelems, "Out msg nelems": nelems,
                         "Group size": ranks, "dtype": "Float", "In split size": "[]", "Out split size": "[]",
                         "Process Group Name": "0", "Process Group Description": "default_pg",
                         "Process Group Ranks": str(list(range(ranks)))}
            yield {"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 1, "tid": 1, "ts": t,
                   "dur": dur_cpu + 4, "args": {"External id": ext, "Record function id": 0, **comm_args}}
            made += 1
        yield {"ph": "X", "cat": "cpu_op", "name": "aten::fill_", "pid": 1, "tid": 1, "ts": t + 1, "dur": dur_cpu,
               "args": {"External id": ext, "Record function id": 0, "Sequence number": corr, "Fwd thread id": 0}}
        launch = t + 2
        yield {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1, "ts": launch,
               "dur": 4.5, "args": {"External id": ext, "cbid": 211, "correlation": corr}}
        gpu_t = max(gpu_t + 1.0, launch + 5)
        dur = (400.0 + late_us if nccl else 0.0) + rng.random() * 50 + 2
        args = {"External id": ext, "queued": 0, "device": 0, "context": 1, "stream": 13 if nccl else 7,
                "correlation": corr, "registers per thread": 32, "shared memory": 0, "blocks per SM": 1.5,
                "warps per SM": 6.0, "grid": [216, 1, 1], "block": [128, 1, 1], "est. achieved occupancy %": 9}
        if nccl and kernel_args:
            args.update(comm_args)
        yield {"ph": "X", "cat": "kernel", "name": NCCL_KERNEL if nccl else KERNEL, "pid": 0,
               "tid": 13 if nccl else 7, "ts": gpu_t, "dur": dur, "args": args}
        yield {"ph": "s", "id": corr, "pid": 1, "tid": 1, "ts": launch, "cat": "ac2g", "name": "ac2g"}
        yield {"ph": "f", "id": corr, "pid": 0, "tid": 7, "ts": gpu_t, "cat": "ac2g", "name": "ac2g", "bp": "e"}
        made += 5
        if corr % 50 == 0:
            yield {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": 7,
                   "ts": gpu_t + dur + 1, "dur": 3.0, "args": {"device": 0, "context": 1, "stream": 7,
                                                               "correlation": corr, "bytes": 4096}}
            made += 1
        if not nccl:  # the NCCL stream runs beside the compute stream
            gpu_t += dur
        t += dur_cpu + 3
        corr += 1
        ext += 1


def _cpu_events(rng: random.Random, n: int, late_us: float):
    """~n events: CPU ops on the main thread; every 20th op an all-reduce queued to Gloo's worker thread."""
    t, work_t, made, i = 1_000_000.0, 1_000_000.0, 0, 0
    while made < n:
        i += 1
        dur = 20.0 + rng.random() * 30
        if i % NCCL_EVERY == 0:
            nelems = 1 << rng.randrange(10, 16)
            yield {"ph": "X", "cat": "cpu_op", "name": "c10d::allreduce_", "pid": 1, "tid": 1, "ts": t, "dur": 40.0,
                   "args": {"External id": i, "Record function id": 0, "Concrete Inputs": ["", "", "", "", "False",
                                                                                           "-1"],
                            "Input type": ["TensorList", "", "", "", "Scalar", "Scalar"],
                            "Input Dims": [[[nelems]], [], [], [], [], []]}}
            work_t = max(work_t, t + 5)
            work = 200.0 + late_us + rng.random() * 100
            yield {"ph": "X", "cat": "user_annotation", "name": "gloo:all_reduce", "pid": 1, "tid": 2, "ts": work_t,
                   "dur": work, "args": {"External id": 100_000_000 + i, "Record function id": 0,
                                         "Input type": ["float"], "Input Dims": [[nelems]]}}
            work_t += work
            made += 2
        else:
            yield {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "pid": 1, "tid": 1, "ts": t, "dur": dur,
                   "args": {"External id": i, "Record function id": 0, "Sequence number": i, "Fwd thread id": 0}}
            made += 1
        t += dur + 2


def write_rank(path: str, rank: int, ranks: int, events: int, form: str = "gpu", kernel_args: bool = True,
               late_us: float = 0.0) -> str:
    """One rank's trace of about `events` events at path (.json, or .json.gz compressed); returns path."""
    rng = random.Random(rank)
    stream = (_gpu_events(rng, events, kernel_args, late_us, ranks) if form == "gpu"
              else _cpu_events(rng, events, late_us))
    head = json.dumps(_header(rank, ranks, form))[:-1]
    opener = gzip.open(path, "wt", compresslevel=1) if path.endswith(".gz") else open(path, "w")
    with opener as f:
        f.write(head + ', "traceEvents": [\n')
        first, chunk = True, []
        for e in stream:
            chunk.append(e)
            if len(chunk) == CHUNK:
                f.write(("" if first else ",\n") + ",\n".join(map(json.dumps, chunk)))
                first, chunk = False, []
        if chunk:
            f.write(("" if first else ",\n") + ",\n".join(map(json.dumps, chunk)))
        f.write('\n], "traceName": "%s", "displayTimeUnit": "ms", "baseTimeNanoseconds": 1700000000000000000}\n'
                % os.path.basename(path))
    return path


def write_job(folder: str, ranks: int = 2, events: int = 10_000, form: str = "gpu", kernel_args: bool = True,
              gz: bool = False, late_rank: int | None = None) -> list[str]:
    """Every rank's trace in folder (rank{r}.json[.gz]); late_rank's collectives are shorter (it came late)."""
    os.makedirs(folder, exist_ok=True)
    out = []
    for r in range(ranks):
        late = 0.0 if late_rank is None or r == late_rank else 300.0   # the others wait for it
        out.append(write_rank(os.path.join(folder, f"rank{r}.json" + (".gz" if gz else "")), r, ranks, events,
                              form, kernel_args, late))
    return out


# ------------------------------------------------------------------------------ jobs of several groups
def group_job(program, groups: dict, steps: int = 3, slow=None, compute_us: float = 1000.0,
              transfer_us: float = 200.0, jitter_us: float = 0.0, seed: int = 0) -> list:
    """RankTraces of a job that runs `program` (per rank: the names of the groups it all-reduces in, in order)
    `steps` times, each call after compute_us (+- jitter_us) of compute; slow: {rank: (step, call index, us)}
    sleeps (step None: every step; or {rank: us}: before its first call of every step). Simulated on one clock: a call ends for all its
    members at the last arrival + transfer_us. Each rank's clock gets its own random offset (nothing may compare
    clocks). groups: {name: ranks}."""
    from commlib.profiling import groups as pg
    from commlib.profiling.traces import Call, RankTrace

    rng = random.Random(seed)
    ranks = sorted(program)
    todo = {r: [(s, i, g) for s in range(steps) for i, g in enumerate(program[r])] for r in ranks}
    t = {r: 0.0 for r in ranks}
    arrival, calls, compute = {}, {r: [] for r in ranks}, {r: [] for r in ranks}
    seen = {r: {} for r in ranks}
    while any(todo.values()):
        moved = False
        for r in ranks:
            while todo[r]:
                s, i, g = todo[r][0]
                key = (g, seen[r].get(g, 0))
                if (r, key) not in arrival:
                    extra = (slow or {}).get(r, 0.0)
                    if isinstance(extra, tuple):
                        extra = extra[2] if extra[0] in (None, s) and extra[1] == i else 0.0
                    elif i:
                        extra = 0.0
                    work = compute_us + (rng.uniform(-jitter_us, jitter_us) if jitter_us else 0.0)
                    compute[r].append((t[r], t[r] + work))
                    arrival[(r, key)] = t[r] + work + extra
                members = groups[g]
                if not all((m, key) in arrival for m in members):
                    break
                end = max(arrival[(m, key)] for m in members) + transfer_us
                calls[r].append((g, arrival[(r, key)], end))
                t[r] = end
                seen[r][g] = key[1] + 1
                todo[r].pop(0)
                moved = True
        if not moved:
            raise ValueError("program: the ranks' calls deadlock (each waits for a group another has not reached)")
    made = [pg.Group(name, tuple(m)) for name, m in groups.items()]
    out = []
    for r in ranks:
        off = rng.uniform(-1e6, 1e6)
        cs = [Call(r, "all_reduce", g, len(groups[g]), 1 << 20, "float32", a + off, e - a, None, None, None)
              for g, a, e in calls[r]]
        spans = [(a + off, b + off) for a, b in compute[r]]
        out.append(RankTrace(f"rank{r}.json", r, len(ranks), "gloo", None, cs, spans,
                             (spans[0][0], cs[-1].end_us), (), [g for g in made if r in g.ranks]))
    return out
