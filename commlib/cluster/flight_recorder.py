"""The Flight Recorder inside a rank: switched on with a small buffer, dumped on request.

torch keeps, per process, a ring buffer of the last N collectives each rank issued (Gloo too since
torch 2.x: `TORCH_FR_BUFFER_SIZE`, read when the first process group is created; torch's default is
2000 entries). When a run fails, the parent sends DUMP_SIGNAL; a thread of the rank that waits for
nothing else writes `snapshot()` to `fr_rank{r}.pkl`:
  fr       the Flight Recorder dump (`torch._C._distributed_c10d._dump_fr_trace()`, unpickled), with
           its pg_config filled in from torch's own tables (on Gloo it comes back empty, and torch's
           analyser, torch.distributed.flight_recorder, needs it to match records across ranks);
  waiting  the torch.distributed call the rank's main thread is blocked in, read from its frames
           (send/recv are not in Gloo's records: this is how an unmatched recv is seen);
  p2p      the sends and receives it posted and those still pending (p2p_log.py: a rank blocked in
           work.wait() of an isend/irecv is in no torch.distributed call);
  calls    the last collectives' roots and reduce ops (call_check.py: the records hold neither).
The signal is blocked in every thread but that one (block_dump_signal() runs before any thread
starts), so it is delivered there even while the main thread waits inside Gloo.
"""

from __future__ import annotations

import os
import pickle
import re
import signal
import sys
import threading
import time

from commlib.cluster import call_check, dumps, p2p_log
from commlib.cluster.output import dropping_stderr_lines

DUMP_SIGNAL = getattr(signal, "SIGUSR2", None)
DEFAULT_BUFFER = 64   # entries per rank: enough for the last steps of a lesson's loop, cheap to dump
TORCH_DEFAULT_BUFFER = 2000  # torch 2.13's own default (FlightRecorder.hpp: getCvarInt(TORCH_FR_BUFFER_SIZE, 2000))
# torch reads TORCH_FR_BUFFER_SIZE as a C int (Utils.hpp getCvarInt: std::stoi): 2**31 and up throw inside every
# rank's process-group setup, and the ranks never start. Entries also hold sizes and stacks, so a smaller cap is
# kept: a million records is hours of a lesson's loop.
MAX_BUFFER = 1_000_000


def check_buffer(size) -> int | None:
    """Cluster(flight_recorder=size): None (off) or an int in [1, MAX_BUFFER]; else TypeError/ValueError naming it."""
    if size is None:
        return None
    if isinstance(size, bool) or not isinstance(size, int):
        raise TypeError(f"flight_recorder must be an int in [1, {MAX_BUFFER}] (entries kept per rank) or None (off), "
                        f"got {type(size).__name__}")
    if not 1 <= size <= MAX_BUFFER:
        raise ValueError(f"flight_recorder must be an int in [1, {MAX_BUFFER}] (entries kept per rank) or None "
                         f"(off), got {size}")
    return size
_C10D_FILE = os.path.join("torch", "distributed", "distributed_c10d.py")
_USER_SKIP = (os.path.join("torch", "distributed"), os.path.join("commlib", "cluster", "worker.py"))
CALLS = {"send", "recv", "isend", "irecv", "broadcast", "all_reduce", "all_reduce_coalesced", "reduce",
         "all_gather", "all_gather_into_tensor", "gather", "scatter", "reduce_scatter", "reduce_scatter_tensor",
         "all_to_all", "all_to_all_single", "barrier", "monitored_barrier", "batch_isend_irecv",
         "broadcast_object_list", "all_gather_object", "send_object_list", "recv_object_list",
         "new_group", "new_subgroups", "new_subgroups_by_enumeration", "split_group"}  # a mesh's groups wait for all
P2P_CALLS = {"send", "recv", "isend", "irecv", "batch_isend_irecv", "send_object_list", "recv_object_list"}


def configure(buffer_size: int | None, debug: bool) -> None:
    """Before init_process_group: the Flight Recorder's size (None: off) and, with debug, torch's
    collective fingerprint checks (TORCH_DISTRIBUTED_DEBUG=DETAIL, set here because torch read the
    variable when the zygote imported it)."""
    import torch.distributed as dist

    os.environ["TORCH_FR_BUFFER_SIZE"] = str(int(buffer_size or 0))  # torch: 0 is off
    p2p_log.install()
    call_check.install(check=debug)  # roots and reduce ops: logged always, compared across the group in debug
    if debug:
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = "DETAIL"
        dist.set_debug_level(dist.DebugLevel.DETAIL)


def block_dump_signal() -> None:
    """Call first thing in the rank, in its only thread: threads started later inherit the mask."""
    if DUMP_SIGNAL is not None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {DUMP_SIGNAL})


def start_dump_thread(path: str) -> None:
    """Write snapshot() to `path` (atomically) each time DUMP_SIGNAL arrives."""
    if DUMP_SIGNAL is None:
        return
    main = threading.main_thread().ident

    def serve():
        if hasattr(signal, "SIGUSR1"):  # the stack dump (faulthandler, SIGUSR1) is for the main thread, not us
            signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGUSR1})
        while True:
            signal.sigwait({DUMP_SIGNAL})
            try:
                data = pickle.dumps(snapshot(main), protocol=pickle.HIGHEST_PROTOCOL)
                with open(path + ".tmp", "wb") as f:
                    f.write(data)
                os.replace(path + ".tmp", path)
            except Exception:  # a failed dump must never take the rank down; the diagnosis says less
                pass

    threading.Thread(target=serve, name="commlib-flight-recorder", daemon=True).start()


def snapshot(thread_id: int | None = None) -> dict:
    """This rank's Flight Recorder records and the call its main thread waits in (see the module docstring)."""
    import torch
    import torch.distributed as dist

    out: dict = {"fr": None, "waiting": None, "groups": {}, "failed": _failed[0] if _failed else None,
                 "p2p": p2p_log.snapshot(), "calls": call_check.snapshot()}
    if dist.is_initialized():
        out["groups"] = group_table()
        try:
            fr = pickle.loads(torch._C._distributed_c10d._dump_fr_trace(includeStackTraces=False))
            fr["pg_config"] = {name: {"name": name, "desc": desc, "ranks": str(ranks)}
                               for name, (desc, ranks) in out["groups"].items()}
            out["fr"] = fr
        except Exception:
            pass
    frame = sys._current_frames().get(thread_id or threading.main_thread().ident)
    if frame is not None:
        out["waiting"] = waiting_call(frame)
    return out


_failed: list = []  # the torch.distributed call the last task's exception came from (note_failure)


def note_failure(exc: BaseException | None) -> None:
    """Remember the torch.distributed call `exc` was raised in (None: a task starts, nothing failed; the p2p log
    then marks where this task's sends and receives begin)."""
    _failed.clear()
    if exc is None:
        p2p_log.mark_task()
    tb = exc.__traceback__ if exc is not None else None
    while tb is not None and tb.tb_next is not None:
        tb = tb.tb_next
    call = waiting_call(tb.tb_frame) if tb is not None else None
    if call is not None:
        _failed.append(call)


def group_table() -> dict:
    """{process group name: (description, [global ranks])} for every group torch knows in this rank."""
    import torch.distributed as dist
    from torch.distributed import distributed_c10d as c10d

    table = {}
    for pg, ranks in c10d._world.pg_group_ranks.items():
        name = c10d._world.pg_names.get(pg, "")
        desc = getattr(pg, "group_desc", "") or ("default_pg" if pg is dist.GroupMember.WORLD else "undefined")
        table[name] = (desc, sorted(ranks))
    return table


def _describe_tensor(t) -> dict | None:
    import torch

    if isinstance(t, torch.Tensor):
        return {"shape": list(t.shape), "dtype": str(t.dtype).replace("torch.", "")}
    if isinstance(t, (list, tuple)) and t and isinstance(t[0], torch.Tensor):
        return _describe_tensor(t[0])
    return None


def waiting_call(frame) -> dict | None:
    """The outermost torch.distributed call on this stack -> {op, tensor, peer, group, where}, or None."""
    call, user = None, None
    f = frame
    while f is not None:
        filename = f.f_code.co_filename
        if filename.endswith(_C10D_FILE) and f.f_code.co_name in CALLS:
            call = f  # keep going out: all_reduce_coalesced may call into others
        elif call is not None and user is None and not any(s in filename for s in _USER_SKIP):
            user = f
        f = f.f_back
    if call is None:
        return None
    import torch.distributed as dist

    args = call.f_locals
    name = call.f_code.co_name
    tensor = next((_describe_tensor(args[k]) for k in ("tensor", "input_tensor", "input", "tensor_list",
                                                        "tensors", "output_tensor", "output")
                   if _describe_tensor(args.get(k)) is not None), None)
    peer = next((args[k] for k in ("dst", "src", "group_dst", "group_src") if isinstance(args.get(k), int)), None)
    group = args.get("group")
    try:
        from torch.distributed import distributed_c10d as c10d

        group_name = c10d._world.pg_names.get(group or dist.GroupMember.WORLD, "")
    except Exception:  # not initialised, or a group object torch does not know
        group_name = ""
    where = ""
    if user is not None:
        filename = user.f_code.co_filename
        where = f"{user.f_code.co_name}() line {user.f_lineno}"
        where += "" if filename.startswith("<") else f" of {os.path.basename(filename)}"
    return {"op": name, "p2p": name in P2P_CALLS, "tensor": tensor, "peer": peer, "group": group_name,
            "where": where}


# ------------------------------------------------------------------------------ parent side
def dump_path(folder: str, rank: int) -> str:
    return os.path.join(folder, f"fr_rank{rank}.pkl")


def ask(pids: dict, folder: str) -> list:
    """Signal each rank {rank: pid} to write its snapshot -> the ranks asked."""
    asked = []
    for rank, pid in pids.items():
        try:
            os.remove(dump_path(folder, rank))
        except OSError:
            pass
        try:
            if DUMP_SIGNAL is not None:
                os.kill(pid, DUMP_SIGNAL)
                asked.append(rank)
        except (ProcessLookupError, PermissionError):
            pass
    return asked


def collect(asked: list, folder: str, deadline: float) -> dict:
    """Wait until every asked rank's snapshot is written, or the deadline -> {rank: snapshot or None}."""
    while time.monotonic() < deadline and not all(os.path.exists(dump_path(folder, r)) for r in asked):
        time.sleep(0.02)
    out = {}
    for rank in asked:
        try:
            out[rank] = dumps.load(dump_path(folder, rank))
        except dumps.DumpRefused:
            out[rank] = None
    return out


# A whole stack dump (faulthandler's, see Cluster._timeout_message) ends with the rank's outermost frame, the
# worker's `-c` command, or with faulthandler's "..." past its depth limit; one that ends otherwise counts as
# whole once it has not grown for STACK_SETTLE_POLLS polls of 50 ms.
_STACK_END = re.compile(rb'(File "<string>", line \d+ in <module>|\.\.\.)\n\Z')
STACK_SETTLE_POLLS = 10


def await_stack_dumps(paths: dict, deadline: float) -> None:
    """Wait until every rank's stack dump {rank: (path, its size before the signal)} is whole, or the deadline.
    faulthandler writes it from a signal handler, a piece at a time, outermost frame last: a rank that a loaded
    machine pauses mid-dump leaves a file that stops growing for a while yet is cut short, so a pause in its
    growth is not its end (see _STACK_END)."""
    def tail(path: str, offset: int) -> bytes:
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                return f.read()
        except OSError:
            return b""

    pending = {rank: [b"", 0] for rank in paths}  # rank -> [what it had written at the last poll, polls unchanged]
    while pending and time.monotonic() < deadline:
        for rank in list(pending):
            text, seen = tail(*paths[rank]), pending[rank]
            seen[1] = seen[1] + 1 if text and text == seen[0] else 0
            seen[0] = text
            if (text and _STACK_END.search(text)) or seen[1] >= STACK_SETTLE_POLLS:
                del pending[rank]
        if pending:
            time.sleep(0.05)


def request_snapshots(pids: dict, folder: str, deadline: float) -> dict:
    """ask() then collect()."""
    return collect(ask(pids, folder), folder, deadline)


# --------------------------------------------------------------------------- reading records
def records(snapshot: dict | None) -> list[dict]:
    """The collective records of one snapshot, oldest first (send/recv are not recorded on Gloo)."""
    fr = (snapshot or {}).get("fr") or {}
    return [e for e in fr.get("entries", []) if not e.get("is_p2p")]


def describe(entry: dict) -> str:
    """'#2 all_reduce [4] float32' for one record (what the diagnosis calls it)."""
    from commlib.cluster.matching import describe_record

    return describe_record(entry)


def table(snapshots: dict, last: int = 3) -> str:
    """Each rank's last `last` records, one line per rank: what the Flight Recorder saw, side by side."""
    lines = []
    for rank in sorted(snapshots):
        recs = records(snapshots[rank])[-last:]
        shown = " | ".join(describe(e) for e in recs) if recs else "(no records)"
        lines.append(f"rank {rank}: {shown if snapshots[rank] else '(no snapshot: the rank was gone)'}")
    return "\n".join(lines)


def arrivals(snapshots: dict) -> dict:
    """{collective number: {rank: ms after the first rank called it}}, from the records' creation times:
    the rank that arrives last at every collective is the straggler the others wait for."""
    created: dict = {}
    for rank, snap in snapshots.items():
        for e in records(snap):
            created.setdefault((e["process_group"][0], e["collective_seq_id"]), {})[rank] = e["time_created_ns"]
    out = {}
    for (_, seq), by_rank in sorted(created.items()):
        first = min(by_rank.values())
        out[seq] = {r: (t - first) / 1e6 for r, t in sorted(by_rank.items())}
    return out


def write_dumps(snapshots: dict, folder: str, prefix: str = "rank_") -> list[str]:
    """Each rank's records as the files torch writes on a GPU job's timeout: see dumps.write."""
    return dumps.write(snapshots, folder, prefix)


def read_dumps(folder: str, prefix: str = "rank_") -> dict:
    """{rank: snapshot} from the dumps in folder, which table(), arrivals(), replay_steps() and the replay widget
    read. Loaded as data only (dumps.load): a file that asks to import anything is refused (DumpRefused)."""
    return dumps.read(folder, prefix)


def torch_analyser(folder: str, prefix: str = "rank_", timeout_s: float = 60.0) -> str:
    """Run torch's own Flight Recorder analyser (torch.distributed.flight_recorder.fr_trace, the `torchfrtrace`
    command) on the dumps in folder -> what it prints."""
    import subprocess

    cmd = [sys.executable, "-m", "torch.distributed.flight_recorder.fr_trace", folder, "-p", prefix,
           "--allow-incomplete-ranks"]
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    return (done.stdout + done.stderr).strip()


# '[rank1]:[E1203 17:05:54.540150514 ProcessGroupGloo.cpp:67] ...': torch's C++ log (c10), level, date, time, file
_TORCH_LOG = re.compile(r"^(\[rank\d+\]:)?\[[DIWEF]\d{4} \d\d:\d\d:\d\d\.\d+ [^\]]+\] ")


def without_torch_log():
    """Inside a rank: torch's C++ log lines, which it writes straight to file descriptor 2 with a time stamp
    (monitored_barrier's failure, for one, is logged there as well as raised), are dropped while the block
    runs; any other line written meanwhile is passed on to stderr. The exception says the same."""
    return dropping_stderr_lines(_TORCH_LOG)


def replay_steps(snapshots: dict) -> list[dict]:
    """The records rank by rank, one collective at a time (per process group, in number order) ->
    [{"group", "seq", "calls": {rank: '#n op [size] dtype' or None (no record)}, "odd": [ranks]}];
    odd: the ranks whose call differs from the most common one, or that have none."""
    from collections import Counter

    by_step: dict = {}
    for rank, snap in snapshots.items():
        for e in records(snap):
            by_step.setdefault((e["process_group"][0], e["collective_seq_id"]), {})[rank] = describe(e)
    lowest = {}  # per group, the first number every rank with records still has (ring buffers wrap)
    for rank, snap in snapshots.items():
        for g in {e["process_group"][0] for e in records(snap)}:
            first = min(e["collective_seq_id"] for e in records(snap) if e["process_group"][0] == g)
            lowest[g] = max(lowest.get(g, 0), first)
    steps = []
    for (group, seq), calls in sorted(by_step.items(), key=lambda kv: (len(kv[0][0]), kv[0])):
        if seq < lowest.get(group, 0):
            continue
        full = {r: calls.get(r) for r in sorted(snapshots) if snapshots[r]}
        common, _ = Counter(c for c in full.values() if c).most_common(1)[0]
        steps.append({"group": group, "seq": seq, "calls": full,
                      "odd": [r for r, call in full.items() if call != common]})
    return steps
