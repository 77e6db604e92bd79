"""Who sends to whom: the schedules of the textbook algorithms, as pure functions of rank and world size.

commlib.algorithms runs them on real ranks; commlib.cost counts their bytes and prices them. Both read
them from here, so the model and the code follow one schedule.

    shard_sizes                            how a tensor of numel elements splits into p shards
    fold_to_power_of_two, halving_ranges   MPICH's recursive doubling / halving (Thakur et al. 2005)
    binary_tree, double_binary_tree        NCCL's trees (NCCL 2.30.7 src/graph/trees.cc)
"""

from __future__ import annotations

from commlib import _validate as check


def check_p(world_size) -> int:
    """The world size as an int >= 1 (every cost function checks it the same way)."""
    return check.integer("world_size", world_size, low=1)


def is_power_of_two(p: int) -> bool:
    p = check.integer("p", p)
    return p >= 1 and p & (p - 1) == 0


def shard_sizes(numel: int, world_size: int) -> list[int]:
    """Split numel elements into world_size shards as evenly as possible, the first numel % p one larger."""
    p = check_p(world_size)
    q, r = divmod(check.integer("numel", numel, low=0), p)
    return [q + 1 if i < r else q for i in range(p)]


def binomial_children(vr: int, p: int) -> int:
    """How many children relative rank vr has in a binomial tree of p ranks rooted at 0."""
    k, children = 0, 0
    while (1 << k) < p:
        mask = 1 << k
        if vr < mask and vr + mask < p:
            children += 1
        k += 1
    return children


def fold_to_power_of_two(rank: int, p: int) -> tuple[int | None, int]:
    """MPICH's step for non-powers of two: of the first 2*rem ranks, the even ones hand their data to the
    odd neighbour and sit out. -> (rank among the p' = 2^floor(lg p) ranks that go on, or None; p')."""
    p2 = 1 << (p.bit_length() - 1)
    rem = p - p2
    if rank < 2 * rem:
        return (None if rank % 2 == 0 else rank // 2), p2
    return rank - rem, p2


def halving_ranges(new_rank: int, p2: int) -> list[tuple[int, int, int, int, int]]:
    """Recursive halving over chunk indices 0..p2-1, one round per bit from the highest:
    (partner, send_lo, send_hi, keep_lo, keep_hi). After the last round rank r keeps chunk r.
    Recursive doubling (all-gather) runs the same rounds backwards, sending the kept range."""
    rounds = []
    lo, hi = 0, p2
    mask = p2 >> 1
    while mask:
        mid = (lo + hi) // 2
        partner = new_rank ^ mask
        if new_rank & mask:
            rounds.append((partner, lo, mid, mid, hi))
            lo = mid
        else:
            rounds.append((partner, mid, hi, lo, mid))
            hi = mid
        mask >>= 1
    return rounds


def binary_tree(world_size: int) -> list[tuple[int, list[int]]]:
    """NCCL's binary tree over ranks 0..p-1, rooted at 0 (NCCL 2.30.7 src/graph/trees.cc, ncclGetBtree):
    rank r != 0 with lowest set bit b hangs under (r ^ b) | 2b, or r ^ b when that is out of range; its
    children are r - b/2 and r + b/2 (the latter halved until in range). Rank 0's one child is the largest
    power of two below p. -> per rank (parent or -1, children)."""
    p = check_p(world_size)
    tree = []
    for r in range(p):
        if r == 0:
            top = 1 << (p - 1).bit_length()   # the smallest power of two >= p
            tree.append((-1, [top >> 1] if p > 1 else []))
            continue
        bit = r & -r
        parent = (r ^ bit) | (bit << 1)
        if parent >= p:
            parent = r ^ bit
        low, children = bit >> 1, []
        if low:
            children.append(r - low)
            while low and r + low >= p:
                low >>= 1
            if low:
                children.append(r + low)
        tree.append((parent, children))
    return tree


def double_binary_tree(world_size: int) -> list[list[tuple[int, list[int]]]]:
    """NCCL's double binary tree (trees.cc, ncclGetDtree; Sanders, Speck, Traeff 2009): the binary tree, and
    a second one that mirrors it (r -> p-1-r) when p is even, or shifts it by one rank when p is odd, so that
    a rank that is a leaf in one tree is inner in the other. Each tree carries half of the data."""
    p = check_p(world_size)
    first = binary_tree(p)
    if p % 2 == 0:
        move = lambda r: p - 1 - r          # noqa: E731  (the mirror is its own inverse)
        unmove = move
    else:
        move = lambda r: (r - 1) % p        # noqa: E731
        unmove = lambda r: (r + 1) % p      # noqa: E731
    second = []
    for r in range(p):
        parent, children = first[move(r)]
        second.append((-1 if parent < 0 else unmove(parent), [unmove(c) for c in children]))
    return [first, second]


def tree_height(tree: list[tuple[int, list[int]]]) -> int:
    """Edges on the longest root-to-leaf path."""
    def depth(r):
        d = 0
        while tree[r][0] >= 0:
            r, d = tree[r][0], d + 1
        return d
    return max(depth(r) for r in range(len(tree)))


def dbtree_sent(p: int, halves) -> list[float]:
    """Bytes each rank sends in a double-binary-tree all-reduce whose trees carry `halves` bytes: in each
    tree, its half once up to its parent (reduce) and once down to each child (broadcast)."""
    trees = double_binary_tree(p)
    return [sum(h * ((t[r][0] >= 0) + len(t[r][1])) for h, t in zip(halves, trees)) for r in range(p)]
