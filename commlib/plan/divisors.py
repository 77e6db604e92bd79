"""The divisors of a count, for the planner's search over ways to split a world and a batch.

The search runs over every tp, pp (and cp) dividing the world size and every number of micro-batches dividing
the batch per data-parallel rank. Listing the divisors of n by trying 1..n takes n steps: 2^34 sequences
would never finish. Factoring n by trial division takes at most sqrt(n) steps (when n is prime), and far
fewer for the round numbers batches and clusters are made of.
"""

from __future__ import annotations

import functools


@functools.lru_cache(maxsize=1024)
def divisors(n: int) -> list[int]:
    """The divisors of n (an int >= 1) in increasing order, from its prime factors."""
    divs, f, rest = [1], 2, n
    while f * f <= rest:
        k = 0
        while rest % f == 0:
            rest, k = rest // f, k + 1
        divs = [d * f**e for d in divs for e in range(k + 1)]
        f += 1 if f == 2 else 2
    if rest > 1:
        divs = divs + [d * rest for d in divs]
    return sorted(divs)
