"""What a failed run() raises: RankError (a rank raised), ClusterTimeout (no answer in time), RankDied (both)."""

from __future__ import annotations


class RankError(RuntimeError):
    """A function raised inside a rank. `.rank` names it; the message holds its traceback. `.diagnosis`:
    {"kind": "mismatch"|"missing"|"p2p"|"unknown", "ranks": [culprits], "detail": the message's first line}
    (see cluster/diagnosis.py). `.snapshots`: {rank: what its Flight Recorder held} (cluster/flight_recorder.py)."""

    diagnosis: dict | None = None
    snapshots: dict | None = None

    def __init__(self, rank: int, message: str, remote_traceback: str = ""):
        super().__init__(message)
        self.rank = rank
        self.remote_traceback = remote_traceback


class ClusterTimeout(TimeoutError):
    """No answer from some ranks within the timeout. `.ranks` lists them; `.diagnosis`, `.snapshots` as RankError's."""

    diagnosis: dict | None = None
    snapshots: dict | None = None

    def __init__(self, message: str, ranks: list[int]):
        super().__init__(message)
        self.ranks = ranks


class RankDied(RankError, ClusterTimeout):
    """A rank process ended (killed, crashed) instead of answering: both a RankError and a ClusterTimeout.
    It left no Python traceback; remote_traceback holds one line saying how it ended."""

    def __init__(self, rank: int, message: str):
        RankError.__init__(self, rank, message, f"RankDied: {message}")
        self.ranks = [rank]
