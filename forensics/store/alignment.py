"""Two sequences of entries aligned in order: the longest chain of matched pairs that
increases on both sides (patience sorting, O(n log n)), and the gaps between its links.

The candidate pairs come from an occurrence-numbered join (the k-th copy of a line on one
side with the k-th on the other), so they are one-to-one and each side's numbers ascend
within a line; a chain keeps only pairs that agree with every other pair's order, so two
logs that share lines in another order do not pass for one. No O(n·m) diff is needed:
the join found the candidates.
"""

from __future__ import annotations

from bisect import bisect_left

import numpy as np


def longest_chain(new: np.ndarray, old: np.ndarray) -> np.ndarray:
    """Indices of the pairs (new[i], old[i]) that form a longest chain increasing on both
    sides. The pairs need not be sorted; each number appears at most once a side."""
    if not len(new):
        return np.zeros(0, dtype=np.int64)
    order = np.argsort(new, kind="stable")
    seq = np.asarray(old)[order]
    if len(seq) < 2 or bool(np.all(np.diff(seq) > 0)):  # the usual case: in order already
        return order
    tails: list[int] = []  # the smallest old number ending a chain of each length
    tail_at: list[int] = []  # where in seq that chain ends
    back = np.full(len(seq), -1, dtype=np.int64)
    for i, v in enumerate(seq.tolist()):
        k = bisect_left(tails, v)
        if k:
            back[i] = tail_at[k - 1]
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k] = v
            tail_at[k] = i
    chain = []
    i = tail_at[-1]
    while i >= 0:
        chain.append(i)
        i = int(back[i])
    return order[np.array(chain[::-1], dtype=np.int64)]


def gaps(
    new_links: np.ndarray, old_links: np.ndarray, new_free: np.ndarray, old_free: np.ndarray
) -> list[tuple[np.ndarray, np.ndarray]]:
    """The unmatched numbers of each side between consecutive links of a chain (and before
    the first, after the last), as (new's, old's) per gap, where both sides hold as many:
    the entries that sit at one place in both sequences. `*_links` ascend together;
    `*_free` are each side's unmatched numbers, ascending."""
    cut_new = np.searchsorted(new_free, new_links)
    cut_old = np.searchsorted(old_free, old_links)
    out = []
    for a, b in zip(np.split(new_free, cut_new), np.split(old_free, cut_old), strict=True):
        if len(a) and len(a) == len(b):
            out.append((a, b))
    return out
