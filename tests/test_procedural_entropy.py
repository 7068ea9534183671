"""The floors of the SET and UNION shuffled controls (data/procedural_entropy.py) against brute force: every x,
every arrangement of its row's tokens, the loss positions' surprisal counted from the prefixes' probabilities.
(The Dyck and eca110 floors: tests/test_procedural.py.)"""
import itertools
import math
from collections import Counter

import numpy as np
import pytest

from data import procedural as P
from data import procedural_entropy as E


def shuffled_rows(kind, L, V):
    """{row: probability} of the shuffled control: every x in {1..V-1}^L, the unshuffled row as the generator
    lays it out (prompt, SEP(s), first occurrences, PADs), its non-PAD tokens in every order."""
    sep, pad, dist = V, V + 1, Counter()
    for x in itertools.product(range(1, V), repeat=L):
        answer = list(dict.fromkeys(x))
        prompt = list(x) + [sep] if kind == "set" else list(x[:L // 2]) + [sep] + list(x[L // 2:]) + [sep]
        body = prompt + answer
        perms = list(itertools.permutations(body))
        for q in perms:
            dist[q + (pad,) * (L - len(answer))] += 1 / (V - 1) ** L / len(perms)
    return dist, len(prompt)


def brute_floor(dist, P_len, pad):
    """E[sum over the loss positions (the non-PAD tokens from P on) of -log P(x_t | x_<t)] / E[their number],
    the prefixes' probabilities, and each row's sum."""
    prefix, per_row = Counter(), {}
    for row, p in dist.items():
        for t in range(len(row) + 1):
            prefix[row[:t]] += p
    for row in dist:
        per_row[row] = -sum(math.log(prefix[row[:t + 1]] / prefix[row[:t]]) for t in range(P_len, len(row))
                            if row[t] != pad)
    count = sum(p * sum(t != pad for t in row[P_len:]) for row, p in dist.items())
    return sum(p * per_row[row] for row, p in dist.items()) / count, prefix, per_row


@pytest.mark.parametrize("kind,L,V", [("set", 3, 4), ("set", 4, 3), ("union", 4, 3), ("union", 2, 4)])
def test_shuffled_set_floor_is_the_brute_force_count(kind, L, V):
    """Each prefix's probability by the generating functions equals the enumeration's; the sampled floor (each
    row's sum exact) is within 4 standard errors of the enumerated one; the generator's rows are among them."""
    n_sep = 1 if kind == "set" else 2
    dist, P_len = shuffled_rows(kind, L, V)
    floor, prefix, per_row = brute_floor(dist, P_len, V + 1)
    for row, loss in per_row.items():  # every row's sum, exactly: the counts of its x and of its prefix
        c = np.array([max(row.count(v) - 1, 0) for v in range(1, V)])
        a = np.array([row[:P_len].count(v) for v in range(1, V + 1)])
        assert E.set_row_surprisal(c, a, L, V - 1, n_sep) == pytest.approx(loss, abs=1e-9)
    by_counts = Counter()  # P(A = a) by enumeration: the prefixes of length P grouped by their counts
    for pre, p in prefix.items():
        if len(pre) == P_len:
            by_counts[tuple(pre.count(v) for v in range(1, V + 1))] += p
    for a, p in by_counts.items():
        seen = tuple(sorted(k for k in a[:-1] if k))
        assert E.prefix_log_probability(seen, a[-1], L, V - 1, n_sep) == pytest.approx(math.log(p), abs=1e-9)
    assert len(by_counts) > 3
    mean, se = E.shuffled_set_loss(L, V, n_sep, rows=4000, seed=1)
    m = E.expected_set_size(L, V)
    assert m == pytest.approx(sum(p * sum(t != V + 1 for t in row[P_len:]) for row, p in dist.items()), abs=1e-12)
    assert abs(mean / m - floor) < 4 * se / m and 0 < se / m < 0.05
    assert E.entropy(kind, shuffled=True, L=L, V=V) == pytest.approx(E.shuffled_set_loss(L, V, n_sep)[0] / m)
    tokens, mask = P.generate(kind, 500, seed=2, shuffled=True, L=L, V=V)
    assert {tuple(int(t) for t in r) for r in tokens} <= set(dist)
    assert (mask == ((np.arange(tokens.shape[1]) >= P_len) & (tokens != V + 1))).all()  # the loss positions


def test_the_default_controls_floor():
    """The defaults (L = 64, V = 100): the floor of the shuffled SET answer is below the log of the values it
    draws from (a prefix tells which values remain) and well above 0; UNION's (one SEP more) is close to it."""
    s, u = E.entropy("set", shuffled=True), E.entropy("union", shuffled=True)
    assert 3.0 < s < math.log(99) and abs(s - u) < 0.1
    mean, se = E.shuffled_set_loss(64, 100, 1)
    assert s == mean / E.expected_set_size(64, 100) and se / E.expected_set_size(64, 100) < 0.003
