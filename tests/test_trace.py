"""commlib.algorithms.trace: byte counts, and replay() on a hand-written ring all-reduce of 2 ranks."""

from commlib.algorithms.trace import Event, Trace, replay


def msg(phase, step, src, dst, chunk):
    return Event("ring", phase, step, src, dst, chunk, offset=chunk * 3, numel=3, nbytes=12)


def test_bytes_sent_adds_up_every_message():
    tr = Trace([msg("reduce_scatter", 0, 0, 1, 1), msg("all_gather", 1, 0, 1, 0)])
    assert tr.bytes_sent == 24 and Trace().bytes_sent == 0


def test_replay_merges_in_reduce_scatter_and_copies_in_all_gather():
    rank0 = [msg("reduce_scatter", 0, 0, 1, 1), msg("all_gather", 1, 0, 1, 0)]
    rank1 = [msg("reduce_scatter", 0, 1, 0, 0), msg("all_gather", 1, 1, 0, 1)]
    both, only0, only1 = frozenset({0, 1}), frozenset({0}), frozenset({1})
    states = replay([rank0, rank1], 2)
    assert states == [
        [[only0, only0], [only1, only1]],  # before: each rank holds only its own data
        [[both, only0], [only1, both]],    # after reduce-scatter: rank r owns chunk r, fully reduced
        [[both, both], [both, both]],      # after all-gather: everyone has everything
    ]
