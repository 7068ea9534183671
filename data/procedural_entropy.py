"""
The floors of the procedural data (data/procedural.py): the mean entropy, in nats per token, of the tokens a
kind's loss counts, given the tokens before each, so the lowest mean validation loss any model can reach.
A report sets each pre-trained model's final loss beside it (experiments/procedural.py).

    entropy("dyck")                    # exact: dynamic programming over the depth
    entropy("dyck", shuffled=True)     # exact: a closed form over the bracket-type counts
    entropy("eca110", shuffled=True)   # exact: dynamic programming over the counts seen
    entropy("set", shuffled=True)      # estimated (SET_ROWS sampled rows, each summed exactly): SET and UNION
    entropy("sort")                    # 0: a sequence kind's answer is a function of its prompt

The shuffled controls permute each row's non-PAD tokens (data.procedural.shuffle_rows), so a row is uniform
over the arrangements of its multiset, and what a prefix tells is its counts: every derivation below rests on
that. Tests count each against a brute-force enumeration of small cases (tests/test_procedural.py: Dyck,
eca110; tests/test_procedural_entropy.py: SET, UNION).
"""

import functools
from math import comb, lgamma, log

import numpy as np

from .procedural import _check_kind, _eca110_rollout, _options

SET_ROWS = 10_000  # rows sampled for the SET / UNION controls' floor: a standard error near 0.002 nats a token


def _dyck_entropy(k, length, p_open):
    """Exact sum over t = 1..S-1 of H(x_t | x_<t) of _dyck's rows, by dynamic programming over the depth d
    after t tokens (the prefix fixes d and the top type, so it fixes the next token's law):
        d = 0                      opens, a uniform type:               H = log k
        0 < d and d + 1 <= r - 1   opens w.p. p (p/k a type), closes:   H = h(p) + p log k
        otherwise                  the top type closes:                 H = 0
    with r = S - t tokens left and h the binary entropy."""
    h_free = -(1 - p_open) * np.log(1 - p_open) - p_open * np.log(p_open / k) if 0 < p_open < 1 else \
        (np.log(k) if p_open == 1 else 0.0)
    prob = np.zeros(length + 2)
    prob[1] = 1.0                                           # x_0 always opens: depth 1 after one token
    total = 0.0
    for t in range(1, length):
        r, d = length - t, np.arange(length + 2)
        free = (d > 0) & (d + 1 <= r - 1)
        total += prob[0] * np.log(k) + h_free * prob[free].sum()
        opens = np.where(d == 0, 1.0, np.where(free, p_open, 0.0)) * prob
        prob = np.roll(opens, 1) + np.roll(prob - opens, -1)
    return total


def _shuffled_dyck_entropy(k, length):
    """Exact sum over t = 1..S-1 of H(x_t | x_<t) of shuffle_rows(_dyck rows): H(X) - H(x_0). A Dyck row holds
    n = S/2 openers whose types are independent and uniform, and each type's closers match its openers, so
    the counts C ~ Multinomial(n, 1/k) and, given C, the shuffled row is uniform over its S! / prod c_j!^2
    arrangements:  H(X) = H(C) + E log(S! / prod c_j!^2) = log S! - log n! + n log k - k E[log c!],
    c ~ Binomial(n, 1/k); and x_0 is uniform over the 2k brackets: H(x_0) = log 2k."""
    n = length // 2
    e_log_fact = sum(comb(n, c) * (1 / k) ** c * (1 - 1 / k) ** (n - c) * lgamma(c + 1) for c in range(n + 1))
    return lgamma(length + 1) - lgamma(n + 1) + n * np.log(k) - k * e_log_fact - np.log(2 * k)


@functools.lru_cache(maxsize=None)
def _shuffled_eca110_entropy(width, rows):
    """Exact sum over the loss positions t (the cells of rows 1..; row 0 and the SEPs are not counted) of
    H(x_t | x_<t) of shuffle_rows(eca110 rows). A row of S = rows (w + 1) - 1 tokens holds rows - 1 SEPs and
    rows w cells, n1 of them 1: P(n1) by running Rule 110 from every one of the 2^w first rows. Given n1 the
    shuffled row is uniform over its arrangements, so the prefix enters only by its counts (z zeros, a ones,
    b SEPs after t tokens): P(z, a, b | n1) = C(c0, z) C(n1, a) C(rows - 1, b) / C(S, t), the posterior of n1
    is proportional to P(n1) C(c0, z) C(n1, a), and x_t is 1 w.p. E[n1 - a] / (S - t), SEP w.p.
    (rows - 1 - b) / (S - t)."""
    from scipy.special import gammaln
    first = (np.arange(2 ** width)[:, None] >> np.arange(width)) & 1
    n1 = np.bincount(sum(r.sum(1) for r in _eca110_rollout(first, rows)), minlength=rows * width + 1)
    p_n1, S, n_sep, cells = n1 / n1.sum(), rows * (width + 1) - 1, rows - 1, rows * width
    lc = lambda n, k: np.where((k >= 0) & (k <= n), gammaln(n + 1) - gammaln(np.clip(k, 0, None) + 1)  # noqa: E731
                               - gammaln(np.clip(n - k, 0, None) + 1), -np.inf)
    c1, log_p = np.arange(cells + 1)[None, :], np.where(p_n1 > 0, np.log(np.where(p_n1 > 0, p_n1, 1)), -np.inf)
    total = 0.0
    for t in range(width + 1, S):
        if t % (width + 1) == width:
            continue                                            # a SEP position: not a loss target
        for b in range(min(t, n_sep) + 1):
            a = np.arange(t - b + 1)[:, None]                    # ones seen; zeros seen z = t - a - b
            log_w = log_p[None, :] + lc(cells - c1, t - a - b) + lc(c1, a)
            a, log_w = a[ok := np.isfinite(log_w).any(1)], log_w[ok]  # the prefixes some n1 can give
            reach = np.exp(log_w + lc(n_sep, b) - lc(S, t)).sum(1)           # P(z, a, b) at t
            post = np.exp(log_w - log_w.max(1, keepdims=True))
            post /= post.sum(1, keepdims=True)
            p = np.stack([np.zeros(len(a)), (post * (c1 - a)).sum(1), np.full(len(a), n_sep - b)], 1) / (S - t)
            p[:, 0] = 1 - p[:, 1] - p[:, 2]
            h = -(np.where(p > 0, p * np.log(np.where(p > 0, p, 1)), 0)).sum(1)
            total += float((reach * h).sum())
    return total


@functools.lru_cache(maxsize=None)
def _set_series(L, P):
    """E(x)^j (j = 0..L) and h_a(x) (a = 0..P) of prefix_log_probability, as coefficients of x^0..x^L."""
    from scipy.special import comb as comb_, factorial
    c = np.arange(L + 1)
    inv_fact, powers = 1 / factorial(c), np.zeros((L + 1, L + 1))
    powers[0, 0] = 1.0
    for j in range(1, L + 1):
        powers[j] = np.convolve(powers[j - 1], np.where(c >= 1, inv_fact, 0.0))[:L + 1]
    h = np.array([np.where(c >= max(1, a - 1), comb_(c + 1, a) * inv_fact, 0.0) for a in range(P + 1)])
    return powers, h


@functools.lru_cache(maxsize=200_000)
def prefix_log_probability(seen, seps_seen, L, K, n_sep):
    """log P(A = a), A the counts in the first P = L + n_sep tokens of a shuffled SET (n_sep = 1) or UNION
    (n_sep = 2) row: `seen` the counts of the values that occur there (sorted; the other values 0), `seps_seen`
    its SEPs. A row's multiset: x ~ Uniform{1..K}^L with counts c, each value of x once more in the answer (its
    first occurrence), n_sep SEPs: N = L + n_sep + m tokens, m the values in x. With C(n, a) binomials,
        P(A = a | c) = prod_v C(c_v + [c_v > 0], a_v) C(n_sep, a_sep) / C(N, P),   P(c) = L! / prod_v c_v! / K^L,
    and the sum over c is a coefficient: a value absent from the prefix is in x (E(x) = e^x - 1) or not (1), a
    value seen a times is h_a(x) = sum_{c >= max(1, a - 1)} C(c + 1, a) x^c / c!; so with M1 = len(seen),
    k0 = K - M1 and j the absent values that are in x,
        P(A = a) = L! / K^L C(n_sep, a_sep) sum_j C(k0, j) [x^L] E(x)^j prod_seen h_a(x) / C(L + n_sep + M1 + j, P)."""
    powers, h = _set_series(L, L + n_sep)
    prod = np.zeros(L + 1)
    prod[0] = 1.0
    for a in seen:
        prod = np.convolve(prod, h[a])[:L + 1]
    k0, P = K - len(seen), L + n_sep
    coef = powers[:min(k0, L) + 1] @ prod[::-1]
    total = sum(comb(k0, j) * float(coef[j]) / comb(L + n_sep + len(seen) + j, P) for j in range(len(coef)))
    return lgamma(L + 1) - L * log(K) + log(comb(n_sep, seps_seen)) + log(total)


def set_row_surprisal(c, a, L, K, n_sep):
    """A shuffled SET / UNION row's summed surprisal at its loss positions (the last m non-PAD tokens, m the values
    in x), exactly, from the counts c of its x (one per value) and a of its prefix (one per value, then the SEPs):
        sum_{t=P}^{N-1} -log P(x_t | x_<t) = log P(x_<P) - log P(x_<N) = log P(x_<P) - log P(row),
    since a prefix holding every token of its row is known to be whole (each value of x then occurs c_v + 1 >= 2
    times and the c_v sum to L): the PADs after it cost nothing. Given its counts, a prefix is one of its
    P! / prod a! orders, each as likely: log P(x_<P) = log P(A = a) - log(P! / prod a!); likewise
    log P(row) = log P(c) + log(prod n_v! n_sep! / N!)."""
    from scipy.special import gammaln
    n, P = c + (c > 0), L + n_sep
    log_prefix = (prefix_log_probability(tuple(sorted(int(x) for x in a[:-1] if x)), int(a[-1]), L, K, n_sep)
                  - lgamma(P + 1) + gammaln(a + 1).sum())
    log_row = (lgamma(L + 1) - L * log(K) - gammaln(c + 1).sum() + gammaln(n + 1).sum() + lgamma(n_sep + 1)
               - lgamma(P + (c > 0).sum() + 1))
    return float(log_prefix - log_row)


@functools.lru_cache(maxsize=None)
def shuffled_set_loss(L, V, n_sep, rows=SET_ROWS, seed=0):
    """(mean, standard error) of set_row_surprisal over ROWS rows drawn as the generator draws them: x's counts
    c ~ Multinomial(L, 1/K), the prefix's counts a hypergeometric from the row's multiset."""
    if L > 160:
        raise ValueError(f"the SET / UNION floor is computed in floating point for L <= 160, got L = {L}")
    K, P = V - 1, L + n_sep
    rng = np.random.default_rng(seed)
    c = rng.multinomial(L, np.full(K, 1 / K), size=rows)
    sums = [set_row_surprisal(ci, rng.multivariate_hypergeometric(np.append(ci + (ci > 0), n_sep), P), L, K, n_sep)
            for ci in c]
    return float(np.mean(sums)), float(np.std(sums, ddof=1) / np.sqrt(rows))


def expected_set_size(L, V):
    """E[m], the mean number of distinct values in x ~ Uniform{1..V-1}^L: the loss tokens of a SET row."""
    return (V - 1) * (1 - (1 - 1 / (V - 1)) ** L)


def entropy(kind, shuffled=False, **options):
    """The mean entropy, in nats per token, of the tokens a kind's loss counts, given the tokens before each:
    the lowest mean val loss any model can reach (S = row length):
        (1 / (S - 1)) * sum_{t=1}^{S-1} H(x_t | x_<t)      Dyck and its shuffled control (every token after the first)
        0                                                 the sequence kinds and eca110: the answer is a
                                                          function of the prompt (row 0)
        (1 / ((rows - 1) w)) * the sum over the cells of rows 1..   eca110's shuffled control
        E[sum over the answer's tokens] / E[m]            SET's and UNION's shuffled controls (estimated)
    None where it is not derived here (dyck_shuffle, the other shuffled sequence kinds)."""
    o = _options(_check_kind(kind), options)
    if kind == "dyck":
        total = _shuffled_dyck_entropy(o["k"], o["length"]) if shuffled else \
            _dyck_entropy(o["k"], o["length"], o["p_open"])
        return float(total / (o["length"] - 1))
    if kind == "eca110" and shuffled:
        return _shuffled_eca110_entropy(o["width"], o["rows"]) / ((o["rows"] - 1) * o["width"])
    if kind in ("set", "union") and shuffled:
        return shuffled_set_loss(o["L"], o["V"], 1 if kind == "set" else 2)[0] / expected_set_size(o["L"], o["V"])
    if kind != "dyck_shuffle" and not shuffled:
        return 0.0
    return None
