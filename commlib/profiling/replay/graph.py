"""A job's per-rank traces as one dependency graph, replayed with new collective times (the what-if's engine).

    g = build(ranks)                  # ranks: traces.load(...) -> Graph
    out = replay(g)                   # as measured: reproduces every rank's step (the identity replay)
    out = replay(g.priced(transfer_us))   # each matched collective's transfer re-priced -> per rank results
    out = replay(g, net)                  # each matched collective a flow on shared links (flows.py, sharing.py)

The idea is Daydream's (Zhu et al., USENIX ATC 2020): the trace becomes a graph of tasks and dependencies, each
task keeps its measured duration unless the question changes it, and the graph is simulated again. Here:

- compute lane: a rank's compute spans (kernels, or the CPU ops off Gloo's threads), merged, in order. Between
  two waits the lane is rigid: compute and the gaps between it (launches, Python, data loading) as measured.
- comm lanes: a rank's collective calls in the order of the thread (Gloo worker) or process group (NCCL's
  stream) that ran them. A call starts at the later of its lane predecessor's end and its queue point (when the
  program issued it: the op that queued it where the trace says, else its own start), a point on the compute
  lane that moves with the lane.
- waits: the compute lane stops at t_from and goes on at t_to only once a call has ended. Stated ones (commlib's
  `commlib:wait` marks: traces.py's RankTrace.waits) and inferred ones: a gap between the rank's innermost
  compute ops and the other ops' starts and ends (RankTrace.leaves: a rank blocked inside an op, as in FSDP2's
  hooks, runs none; one that starts or ends an op is running) that ends within
  `slack` of a call's end was waiting for it (the latest such call; the thread woke when it ended), and is
  taken out of the compute lane (waits.py).
- across ranks: a collective matched across its group (stragglers.matched) ends for every member together, at the
  last member's arrival (on one clock: each rank's offset is the median difference of matched calls' ends) plus
  its transfer, the shortest member's duration (diagnose's straggler rule), unless re-priced; with `net`, the
  flow it starts there ends it, in time order (a discrete-event simulation of the flows).

Lags make the identity replay exact: a task starts at the max over its edges of (source time + lag), where the
edge that bound it in the trace carries the measured gap as its lag and the others none (a call's end keeps its
rank's residual against the common end: clock error and the ring's own spread). What a replay cannot know: a
wait the trace does not show (a call that had ended before the program needed it: no gap, no edge; the step's
end still waits for every call); a CPU that waits for the GPU on CUDA traces (the compute lane is the GPU's).
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field, replace

import numpy as np

from commlib.cost.intervals import overlap_lengths, union_array
from commlib.profiling.replay.clocks import clock_offsets
from commlib.profiling.replay.critical import critical_path
from commlib.profiling.replay.flows import Flows
from commlib.profiling.replay.waits import rank_waits
from commlib.profiling.stragglers import matched


@dataclass
class RankGraph:
    rank: int
    start: float                 # the rank's first and last event, its clock (us)
    end: float
    spans: np.ndarray            # merged compute spans, (n, 2)
    calls: list                  # traces.Call, in start order
    lane: list                   # per call: its comm lane's key
    pred: list                   # per call: index of its lane predecessor, -1 for none
    queue: list                  # per call: its queue point (rank's clock)
    lag_pred: list
    lag_queue: list
    waits: list                  # waits.Wait, in order of t_to
    member: list                 # per call: its matched set, -1 for none
    resid: list                  # per call: measured end - the modelled end (0 for unmatched calls)
    solo: list                   # per call: its duration where unmatched (re-priced like transfers)
    offset: float = 0.0          # this rank's clock - the common clock
    tail: float = 0.0            # end - the last task's end
    steps: list = field(default_factory=list)   # (start, end) of each ProfilerStep#N, its clock (traces.RankTrace)
    offcore: object = None       # merged compute spans that take no core (RankTrace.offcore), (n, 2), or None
    ops: object = None           # the CPU ops its compute counts (RankTrace.ops), None where unknown


@dataclass
class Graph:
    ranks: list                                  # RankGraph, in rank order
    sets: list                                   # per matched set: [(rank position, call index)]
    transfer: list                               # per set: its transfer (us)
    notes: list = field(default_factory=list)
    recorded: list = field(default_factory=list)   # per set: its transfer as recorded (replay with flows: set)
    priced_resid: frozenset = frozenset()          # sets whose members' residuals a scenario priced: not scaled

    def priced(self, transfer, solo=None) -> Graph:
        """A copy with each set's transfer (and each unmatched call's duration: {(rank position, call): us})
        replaced."""
        ranks = self.ranks
        if solo:
            ranks = [replace(r, solo=[solo.get((p, i), d) for i, d in enumerate(r.solo)]) for p, r in enumerate(ranks)]
        return replace(self, ranks=ranks, transfer=list(transfer))


# ------------------------------------------------------------------------------------------ build
def build(ranks) -> Graph:
    """RankTraces (traces.load) -> the job's graph (see the module docstring)."""
    sets, member = [], [[-1] * len(r.calls) for r in ranks]   # per rank, per call: its set
    pos = {r.rank: p for p, r in enumerate(ranks)}
    index = [{id(c): i for i, c in enumerate(r.calls)} for r in ranks]   # matched() returns the ranks' own Calls
    for calls in matched(ranks):
        members = [(pos[c.rank], index[pos[c.rank]][id(c)]) for c in calls]
        for p, i in members:
            member[p][i] = len(sets)
        sets.append(members)
    # per set: its transfer (the shortest member), and each member's residual: measured end against
    # max(arrival) + transfer, on one clock (numpy over all members, set after set)
    at = np.array([(p, i) for m in sets for p, i in m], dtype=np.int64).reshape(-1, 2)
    first = np.cumsum([0] + [len(m) for m in sets[:-1]]) if sets else np.zeros(0, dtype=np.int64)
    bounds = np.cumsum([0] + [len(r.calls) for r in ranks])   # rank p's calls in the flat arrays
    flat = bounds[at[:, 0]] + at[:, 1]
    start = np.array([c.start_us for r in ranks for c in r.calls], dtype=float)[flat]
    took = np.array([c.duration_us for r in ranks for c in r.calls], dtype=float)[flat]
    transfer = np.minimum.reduceat(took, first) if sets else took
    offsets, unplaced = clock_offsets(ranks, sets)
    graphs = [_rank_graph(r, member[p], offsets[p]) for p, r in enumerate(ranks)]
    notes = [f"rank {ranks[p].rank} shares no collective, directly or through others, with rank {ranks[0].rank}: "
             "their clocks are taken as equal" for p in unplaced]
    off = np.asarray(offsets, dtype=float)[at[:, 0]]
    last = np.maximum.reduceat(start - off, first) if sets else start
    resid = np.zeros(bounds[-1])
    resid[flat] = (start + took) - (np.repeat(last + transfer, [len(m) for m in sets]) + off)
    for p, g in enumerate(graphs):
        g.resid = resid[bounds[p]:bounds[p + 1]].tolist()
    transfer = transfer.tolist()
    return Graph(graphs, sets, transfer, notes)


def _rank_graph(r, member: list, offset: float) -> RankGraph:
    calls = r.calls
    n = len(calls)
    spans = union_array(np.asarray(r.compute, dtype=float).reshape(-1, 2))
    threads = getattr(r, "threads", None) or []
    lanes = [threads[i][0] for i in range(n)] if len(threads) == n else [c.group for c in calls]
    issued = getattr(r, "issued", None) or {}
    guess = _queue_guess(spans, calls)
    last, pred, queue, lag_pred, lag_queue = {}, [], [], [], []
    for i, c in enumerate(calls):
        j = last.get(lanes[i], -1)
        last[lanes[i]] = i
        q = min(issued.get(i, guess[i]), c.start_us)
        e = calls[j].end_us if j >= 0 else -np.inf
        pred.append(j)
        queue.append(q)
        if e >= q:   # the lane bound it: it had been queued before the previous call ended
            lag_pred.append(max(0.0, c.start_us - e))
            lag_queue.append(0.0)
        else:
            lag_pred.append(0.0)
            lag_queue.append(c.start_us - q)
    spans, waits = rank_waits(r, spans, queue)
    ends = [c.end_us for c in calls]
    done = max(([spans[-1, 1]] if len(spans) else []) + [w.t_to for w in waits] + ends + [r.wall[0]])
    return RankGraph(r.rank, r.wall[0], max(r.wall[1], done), spans, calls, lanes, pred, queue, lag_pred, lag_queue,
                     waits, member, [0.0] * n, [c.duration_us for c in calls],
                     offset, max(0.0, r.wall[1] - done), list(getattr(r, "steps", None) or []),
                     _offcore(getattr(r, "offcore", None)), getattr(r, "ops", None))


def _offcore(spans):
    return union_array(spans) if spans is not None and len(spans) else None


def _queue_guess(spans, calls) -> list[float]:
    """Where the trace does not say when a call was queued: its start, or, if it started in a gap of the compute
    lane (the program idle: it was queued before and waited behind another call), the end of the compute before."""
    if not calls:
        return []
    starts = np.array([c.start_us for c in calls])
    if not len(spans):
        return starts.tolist()
    k = np.searchsorted(spans[:, 0], starts, side="right") - 1   # the last span starting at or before it
    ok = k >= 0
    before = np.where(ok, spans[np.maximum(k, 0), 1], starts)
    return np.where(ok & (before < starts), before, starts).tolist()


# ----------------------------------------------------------------------------------------- replay
class _Rank:
    """A rank's replay state: its cursor through its tasks, the compute lane's shift history, call times."""

    def __init__(self, g: RankGraph):
        self.g = g
        n = len(g.calls)
        items = [(c.start_us, 1, i) for i, c in enumerate(g.calls)]
        # a wait in lane order, after its call's own item: a wait that ended before its call began (a regrouped
        # bucket queued after the wait on the traced one it holds) sorts after the call (kind 2), not before it
        items += [(max(w.t_to, g.calls[w.call].start_us), 0 if w.t_to > g.calls[w.call].start_us else 2, k)
                  for k, w in enumerate(g.waits)]
        self.items = sorted(items)
        self.at, self.shift = 0, 0.0
        self.hist_t, self.hist_shift, self.hist_to, self.hist_w = [], [], [], []   # per wait resolved, in order
        self.arrival, self.end, self.last = [None] * n, [None] * n, [None] * n   # last: the set's last arrival
        self.bound = [None] * n          # per call: ("pred", j) or ("queue", t as replayed) that set its arrival
        self.wait_bound = [None] * len(g.waits)
        self.wait_to = [None] * len(g.waits)
        self.lane_end = self.finish = None   # set by _result


def replay(g: Graph, net=None) -> dict:
    """Simulate the graph -> {"ranks": {rank: per-rank result}, "step_us" (the longest rank's), "critical_path",
    "forced", "late"}. Per rank: step_us, compute_us, comm_us, hidden_us, exposed_us, waiting_us, idle_us, and
    spans for a timeline (us from the rank's start): compute, comm, waiting. net: None (each set's transfer as
    g.transfer says), or per set (fixed us, alone us, links): each set then a flow of flows.Flows from its last
    arrival, its links shared with the flows beside it (the replay runs in time order where flows decide)."""
    rs = [_Rank(r) for r in g.ranks]
    arrived = [0] * len(g.sets)
    set_end = [None] * len(g.sets)
    last_in = [None] * len(g.sets)
    forced = 0
    flows = Flows() if net is not None else None
    if flows is not None:   # each set's transfer as the flows make it; a member's residual scales with it
        g = replace(g, transfer=list(g.transfer), recorded=list(g.transfer))
    ctx = (g, arrived, set_end, last_in, flows, net)
    todo = rs   # the ranks to run: all, or those a flow's end lets go on (its members)
    while True:
        progress = False
        for st in todo:
            progress = _run(st, rs, ctx) or progress
        todo = rs
        finished = all(st.at == len(st.items) for st in rs)
        if flows is not None:   # every rank waits for a flow (with flows, no rank's run ends another's call
            done = flows.pop()   # before a flow does): the first ends (at the end: those no task waited for)
            if done is not None:
                t, s = done
                g.transfer[s] = t - flows.started[s]
                _finish(s, rs, g, set_end, flows.started[s], t)
                todo = [rs[p] for p in sorted({p for p, _ in g.sets[s]})]
                continue
        if finished:
            break
        if not progress:   # calls matched across ranks in an order no replay can follow: end one set now
            open_sets = [s for s in range(len(g.sets)) if set_end[s] is None and arrived[s]]
            if not open_sets:   # every rank waits for a call no rank can start: no order replays these traces
                stuck = [g.ranks[p].rank for p, st in enumerate(rs) if st.at < len(st.items)]
                raise ValueError(f"the replay cannot go on: rank(s) {stuck} wait for calls that never start "
                                 "(the traces' calls and waits do not fit one order)")
            s = max(open_sets, key=lambda s: arrived[s])
            _close(s, rs, g, set_end, last_in, force=True)
            forced += 1
    out = {g.ranks[p].rank: _result(st) for p, st in enumerate(rs)}
    step = max((o["step_us"] for o in out.values()), default=0.0)
    return {"ranks": out, "step_us": step, "critical_path": critical_path(rs, g, set_end, last_in), "forced": forced,
            "late": flows.late if flows is not None else 0}


def _run(st: _Rank, rs, ctx) -> bool:
    """Resolve st's tasks in order while their inputs are known -> whether any was."""
    g, arrived, set_end, last_in, flows, net = ctx
    r, items, end, arrival, bound, first = st.g, st.items, st.end, st.arrival, st.bound, st.at
    pred, queue, lag_pred, lag_queue, member = r.pred, r.queue, r.lag_pred, r.lag_queue, r.member
    hist_t, hist_shift = st.hist_t, st.hist_shift   # the lane's shift history, grown by _resume
    at = first
    while at < len(items):
        _, kind, k = items[at]
        if kind != 1:   # a wait
            e = end[r.waits[k].call]
            if e is None:
                break
            _resume(st, k, e)
            at += 1
            continue
        j = pred[k]
        if j >= 0 and end[j] is None:
            break
        h = bisect.bisect_right(hist_t, queue[k])
        q = queue[k] + (hist_shift[h - 1] if h else 0.0) + lag_queue[k]
        # the queue point as replayed (the critical path walks back to it, not to a shift learnt later)
        if j < 0 or q >= end[j] + lag_pred[k]:
            arrival[k], bound[k] = q, ("queue", q - lag_queue[k])
        else:
            arrival[k], bound[k] = end[j] + lag_pred[k], ("pred", j)
        at += 1
        s = member[k]
        if s < 0:
            end[k] = arrival[k] + r.solo[k]
            continue
        arrived[s] += 1
        if arrived[s] == len(g.sets[s]):
            if flows is None:
                _close(s, rs, g, set_end, last_in)
            else:   # a flow from the last arrival: its end comes from the network (replay pops it)
                flows.add(s, _last_arrival(s, rs, g, last_in), *net[s])
    st.at = at
    return at > first


def _resume(st: _Rank, k: int, e: float) -> None:
    """Wait k of st's rank ends: its call ended at e (rank's clock); the lane's shift from here on."""
    w = st.g.waits[k]
    lane = w.t_from + st.shift + w.lag_lane
    to = max(lane, e + w.lag_call)
    st.wait_bound[k] = "call" if e + w.lag_call >= lane else "lane"
    st.wait_to[k] = to
    st.shift = to - w.t_to
    at = bisect.bisect_right(st.hist_t, w.t_to)   # in lane order (a wait's call may end after a later wait)
    for hist, value in ((st.hist_t, w.t_to), (st.hist_shift, st.shift), (st.hist_to, to), (st.hist_w, k)):
        hist.insert(at, value)


def _last_arrival(s, rs, g: Graph, last_in, force: bool = False) -> float:
    """The set's last member's arrival on the common clock (last_in[s]: that member). forced: a member the
    replay could not reach arrives as measured."""
    arr = []
    for p, i in g.sets[s]:
        a = rs[p].arrival[i]
        if a is None:
            a = rs[p].g.calls[i].start_us + rs[p].shift
            if force:
                rs[p].arrival[i] = a
        arr.append((a - rs[p].g.offset, p, i))
    last = max(arr)
    last_in[s] = (last[1], last[2])
    return last[0]


def _close(s, rs, g: Graph, set_end, last_in, force: bool = False) -> None:
    """A matched set ends for every member: the last arrival (one clock) + its transfer."""
    last = _last_arrival(s, rs, g, last_in, force)
    _finish(s, rs, g, set_end, last, last + g.transfer[s])


def _finish(s, rs, g: Graph, set_end, last: float, end: float | None = None) -> None:
    """Every member of set s ends at `end` (one clock; its own residual added), its waiting up to `last`."""
    set_end[s] = end if end is not None else last + g.transfer[s]
    was = g.recorded[s] if g.recorded and s not in g.priced_resid else None   # priced_resid: priced, kept
    scale = (set_end[s] - last) / was if was else 1.0   # the ring's spread between members moves with its time
    for p, i in g.sets[s]:
        st = rs[p]
        a = st.arrival[i]
        resid = st.g.resid[i]
        st.end[i] = max(a, set_end[s] + st.g.offset + (resid * scale if resid > 0 else resid))
        st.last[i] = min(st.end[i], last + st.g.offset)


def _result(st: _Rank) -> dict:
    r = st.g
    spans = r.spans
    if len(spans) and st.hist_t:   # each span moves with the lane's shift at its start
        k = np.searchsorted(np.asarray(st.hist_t), spans[:, 0], side="right")
        spans = spans + np.concatenate(([0.0], np.asarray(st.hist_shift)))[k][:, None]
    lane_end = float(spans[-1, 1]) if len(spans) else r.start
    lane_end = max([lane_end] + [t for t in st.wait_to if t is not None])
    end = max([lane_end] + [e for e in st.end if e is not None]) + r.tail
    st.lane_end, st.finish = lane_end, end   # where the critical path starts walking back (critical.py)
    a, e, last = (np.array(x, dtype=float).reshape(-1) for x in (st.arrival, st.end, st.last))   # None: NaN
    calls = np.stack((a, e), axis=1)[~np.isnan(a)]   # each call, in call order
    comm = union_array(calls)
    waiting = union_array(np.stack((a, np.maximum(a, last)), axis=1)[~np.isnan(a) & (np.array(r.member) >= 0)])
    hidden = float(overlap_lengths(comm, spans).sum()) if len(spans) else 0.0
    busy = _span_sum(union_array(np.concatenate((spans, comm))))
    t0 = r.start
    return {"step_us": end - t0, "compute_us": _span_sum(spans), "comm_us": _span_sum(comm), "hidden_us": hidden,
            "exposed_us": _span_sum(comm) - hidden, "waiting_us": _span_sum(waiting),
            "idle_us": max(0.0, end - t0 - busy), "spans": {"compute": spans - t0, "comm": comm - t0,
                                                            "waiting": waiting - t0, "calls": calls - t0}}


def _span_sum(a: np.ndarray) -> float:
    return float((a[:, 1] - a[:, 0]).sum())
