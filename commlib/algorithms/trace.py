"""What the algorithms of commlib.algorithms sent, message by message, and what that did to each rank's data.

Pass trace=Trace() to an algorithm to record every message this rank sends. replay() rebuilds, from the
traces of all ranks, which ranks' data each copy of each chunk holds after every step (chapter 1's
ring stepper draws it).
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class Event:
    """One message: at `step` of `phase`, rank src sent numel elements (nbytes) starting at `offset`
    of the flattened tensor to rank dst; `chunk` is the chunk index for chunked algorithms; inter_node
    says whether it crossed a node boundary (None where the algorithm knows no nodes)."""

    algorithm: str
    phase: str
    step: int
    src: int
    dst: int
    chunk: int | None
    offset: int
    numel: int
    nbytes: int
    inter_node: bool | None = None


@dataclass
class Trace:
    """What this rank sent, message by message. Pass the same Trace to several calls to add them up."""

    events: list[Event] = field(default_factory=list)

    @property
    def bytes_sent(self) -> int:
        return sum(e.nbytes for e in self.events)


def replay(events_by_rank: list[list[Event]], world_size: int) -> list[list[list[frozenset]]]:
    """What each rank's copy of each chunk contains after every step, rebuilt from the ranks' traces.

    -> states[k][rank][chunk] = the set of ranks whose data is reduced into that copy after k steps
    (k = 0: each rank holds only its own data). reduce_scatter messages merge sets; all_gather
    messages overwrite. For the ring algorithms (chunk = index into shard_sizes(numel, p))."""
    events = sorted((e for evs in events_by_rank for e in evs if e.chunk is not None), key=lambda e: e.step)
    state = [[frozenset([r]) for _ in range(world_size)] for r in range(world_size)]
    states = [state]
    for step in sorted({e.step for e in events}):
        new = [row[:] for row in state]
        for e in (e for e in events if e.step == step):
            if e.phase == "reduce_scatter":
                new[e.dst][e.chunk] = state[e.dst][e.chunk] | state[e.src][e.chunk]
            else:
                new[e.dst][e.chunk] = state[e.src][e.chunk]
        state = new
        states.append(state)
    return states
