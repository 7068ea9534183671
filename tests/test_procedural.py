"""Procedural data (data/procedural.py): every generator against an independent plain-python
checker, the loss masks, the shuffled control, seeds, mixtures and the loader."""
import itertools
from collections import Counter

import numpy as np
import pytest

from data import procedural as P
from data.procedural_entropy import entropy

V, SEP, PAD = 100, 100, 101
N = 150


def rows(kind, n=N, seed=0, **o):
    tokens, mask = P.generate(kind, n, seed, **o)
    assert tokens.shape == mask.shape == (n, P.seq_len(kind, **o))
    assert tokens.dtype == np.uint16 and mask.dtype == np.uint8
    return tokens.tolist(), mask.tolist()


def split(row):
    """(parts between SEPs before the answer, answer without PAD) of a reference-layout row."""
    last = max(i for i, t in enumerate(row) if t == SEP)
    head, parts, cur = row[:last], [], []
    for t in head:
        if t == SEP:
            parts.append(cur)
            cur = []
        else:
            cur.append(t)
    parts.append(cur)
    answer = row[last + 1:]
    k = answer.index(PAD) if PAD in answer else len(answer)
    assert all(t == PAD for t in answer[k:])
    return parts, answer[:k], last


def dedupe(xs):
    out = []
    for t in xs:
        if t not in out:
            out.append(t)
    return out


def delete_first(xs, r):
    return xs[:xs.index(r)] + xs[xs.index(r) + 1:] if r in xs else list(xs)


def run_stack(ops):
    st = []
    for op in ops:
        if op == 0:
            assert st, "pop on an empty stack"
            st.pop()
        else:
            assert op not in st, "pushed a token already on the stack"
            st.append(op)
    return st[::-1]


CHECKS = {
    "identity": lambda p: p[0],
    "reverse": lambda p: p[0][::-1],
    "sort": lambda p: sorted(p[0]),
    "set": lambda p: dedupe(p[0]),
    "union": lambda p: dedupe(p[0] + p[1]),
    "delete": lambda p: delete_first(p[0], p[1][0]),
    "stack": lambda p: run_stack(p[0]),
}


@pytest.mark.parametrize("kind", list(CHECKS))
def test_sequence_kinds_answer_and_mask(kind):
    tokens, mask = rows(kind)
    L = 64
    for row, m in zip(tokens, mask):
        parts, answer, last = split(row)
        assert answer == CHECKS[kind](parts)
        sizes = {"union": [L // 2, L // 2], "delete": [L, 1]}.get(kind, [L])
        assert [len(p) for p in parts] == sizes
        assert all(1 <= t < V for p in parts for t in p if not (kind == "stack" and t == 0))
        # the loss mask covers exactly the answer's tokens
        assert m == [1 if i > last and t != PAD else 0 for i, t in enumerate(row)]


def test_stack_follows_the_authors_program_shape():
    tokens, _ = rows("stack", n=400)
    L = 64
    pushes_early = sum(t != 0 for r in tokens for t in r[1:int(L * 2 / 3)])
    pushes_late = sum(t != 0 for r in tokens for t in r[int(L * 2 / 3):L - 1])
    assert pushes_early / (400 * (int(L * 2 / 3) - 1)) > 0.6 and pushes_late / (400 * (L - 1 - int(L * 2 / 3))) < 0.5
    assert all(len(split(r)[1]) >= 1 for r in tokens)       # the stack never ends empty


def test_delete_share_of_rows_with_r():
    tokens, _ = rows("delete", n=4000)
    share = np.mean([split(r)[0][1][0] in split(r)[0][0] for r in tokens])
    assert abs(share - (1 - (1 - 1 / 99) ** 64)) < 0.03


def check_dyck(row, k):
    stack = []
    for t in row:
        if t < k:
            stack.append(t)
        else:
            assert k <= t < 2 * k and stack and stack.pop() == t - k, "closes a bracket that is not the most recent"
    assert not stack, "unbalanced"


def check_dyck_shuffle(row, k, max_depth):
    count = Counter()
    nested = True
    stack = []
    for t in row:
        if t < k:
            count[t] += 1
            stack.append(t)
        else:
            assert count[t - k] > 0, "closes a type that is not open"
            count[t - k] -= 1
            nested &= stack[-1] == t - k
            stack.remove(t - k)
        assert sum(count.values()) <= max_depth
    assert not +count, "unbalanced"
    return nested


def test_dyck_balanced_and_nested():
    tokens, mask = rows("dyck")
    for row in tokens:
        check_dyck(row, P.DEFAULTS["dyck"]["k"])
    assert np.all(np.array(mask) == 1)
    for row in rows("dyck", n=20, k=2, length=40)[0]:
        check_dyck(row, 2)


def test_dyck_opens_with_the_authors_p_open():
    """p_open = 0.5, the authors' runs (their CLI default): where a bracket is free to open or close
    (the stack not empty, room left to close everything), it opens about half the time."""
    assert P.DEFAULTS["dyck"]["p_open"] == 0.5
    k, free, opened = P.DEFAULTS["dyck"]["k"], 0, 0
    for row in rows("dyck", n=400)[0]:
        depth = 0
        for t, tok in enumerate(row):
            remaining = len(row) - t
            if depth > 0 and depth + 1 <= remaining - 1:   # neither forced open nor forced closed
                free += 1
                opened += tok < k
            depth += 1 if tok < k else -1
    assert free > 40_000 and abs(opened / free - 0.5) < 0.005   # sigma 0.0024: 0.49 would be ~4 sigma off


def enumerate_dyck(k, length, p_open):
    """Every row of the Dyck process with its probability, by following each of the generator's choices
    (its rule: an empty stack opens; a bracket opens w.p. p_open while depth + 1 <= remaining - 1)."""
    out = Counter()

    def go(seq, stack, prob):
        if len(seq) == length:
            out[tuple(seq)] += prob
            return
        can_open = len(stack) + 1 <= length - len(seq) - 1
        p = (1.0 if not stack else p_open) if can_open else 0.0
        for j in range(k) if p > 0 else ():
            go(seq + [j], stack + [j], prob * p / k)
        if p < 1:
            go(seq + [stack[-1] + k], stack[:-1], prob * (1 - p))
    go([], [], 1.0)
    return out


def mean_conditional_entropy(dist, length):
    """(1 / (S-1)) sum_{t>=1} H(x_t | x_<t) of a distribution over rows, as H(x_<=t) - H(x_<t)."""
    def h(t):
        m = Counter()
        for row, p in dist.items():
            m[row[:t]] += p
        return -sum(p * np.log(p) for p in m.values() if p > 0)
    return sum(h(t + 1) - h(t) for t in range(1, length)) / (length - 1)


@pytest.mark.parametrize("k,length,p_open", [(2, 6, 0.5), (3, 6, 0.3), (2, 8, 0.7)])
def test_entropy_is_the_brute_force_count(k, length, p_open):
    """entropy (dynamic programming; a closed form for the shuffled control) equals the conditional
    entropies counted over every row of the process, and over every permutation of each row for the control;
    the generator's rows are the enumerated rows at their probabilities."""
    dist = enumerate_dyck(k, length, p_open)
    assert entropy("dyck", k=k, length=length, p_open=p_open) == pytest.approx(
        mean_conditional_entropy(dist, length), abs=1e-9)
    shuffled = Counter()
    for row, p in dist.items():
        perms = list(itertools.permutations(row))
        for q in perms:
            shuffled[q] += p / len(perms)
    assert entropy("dyck", shuffled=True, k=k, length=length, p_open=p_open) == pytest.approx(
        mean_conditional_entropy(shuffled, length), abs=1e-9)
    tokens = P.generate("dyck", 100_000, seed=1, k=k, length=length, p_open=p_open)[0]
    found = Counter(tuple(int(x) for x in r) for r in tokens)
    assert set(found) <= set(dist) and max(abs(found[r] / 1e5 - p) for r, p in dist.items()) < 0.004


RULE_110 = {(1, 1, 1): 0, (1, 1, 0): 1, (1, 0, 1): 1, (1, 0, 0): 0, (0, 1, 1): 1, (0, 1, 0): 1, (0, 0, 1): 1, (0, 0, 0): 0}


@pytest.mark.parametrize("width,n_rows", [(3, 2), (2, 3)])
def test_shuffled_eca110_entropy_is_the_brute_force_count(width, n_rows):
    """eca110's shuffled control: entropy (dynamic programming over the counts seen) equals the conditional
    entropies at the loss positions counted over every first row (Rule 110 by its table) and every
    permutation of its tokens; the generator's shuffled rows are among them."""
    dist = Counter()
    for first in itertools.product((0, 1), repeat=width):
        state, row = list(first), list(first)
        for _ in range(n_rows - 1):
            state = [RULE_110[state[i - 1], state[i], state[(i + 1) % width]] for i in range(width)]
            row += [2] + state
        perms = list(itertools.permutations(row))
        for q in perms:
            dist[q] += 1 / 2 ** width / len(perms)
    tokens, mask = P.generate("eca110", 2000, seed=3, shuffled=True, width=width, rows=n_rows)

    def h(t):
        m = Counter()
        for row, p in dist.items():
            m[row[:t]] += p
        return -sum(p * np.log(p) for p in m.values() if p > 0)
    loss_at = np.flatnonzero(mask[0])
    assert len(loss_at) == (n_rows - 1) * width and (mask == mask[0]).all()
    assert entropy("eca110", shuffled=True, width=width, rows=n_rows) == pytest.approx(
        sum(h(t + 1) - h(t) for t in loss_at) / len(loss_at), abs=1e-9)
    assert {tuple(int(x) for x in r) for r in tokens} <= set(dist)


def test_entropy_floors():
    """The defaults' floors (k = 16, 128 tokens): Dyck below its shuffled control, both below the unigram
    log(2k); the answer of a sequence kind is a function of its prompt: 0; not derived: None."""
    dyck, control = entropy("dyck"), entropy("dyck", shuffled=True)
    assert 1.9 < dyck < control < np.log(32)
    assert entropy("sort") == entropy("eca110") == 0.0
    assert entropy("dyck_shuffle") is None and entropy("sort", shuffled=True) is None
    assert 0.5 < entropy("eca110", shuffled=True) < np.log(3)   # 3 token ids, rows of 0/1 cells and SEPs


def test_dyck_shuffle_balanced_per_type_not_always_nested():
    tokens, mask = rows("dyck_shuffle", k=4)
    nested = [check_dyck_shuffle(r, 4, 16) for r in tokens]
    assert not all(nested)
    assert max(max(r) for r in tokens) <= 7 and np.all(np.array(mask) == 1)
    for row in rows("dyck_shuffle", n=50, max_depth=3)[0]:
        check_dyck_shuffle(row, P.DEFAULTS["dyck_shuffle"]["k"], 3)


def test_eca110_rows_follow_the_rule_on_a_ring():
    w, n_rows = 9, 5
    tokens, mask = rows("eca110", width=w, rows=n_rows)
    table = {(1, 1, 1): 0, (1, 1, 0): 1, (1, 0, 1): 1, (1, 0, 0): 0,
             (0, 1, 1): 1, (0, 1, 0): 1, (0, 0, 1): 1, (0, 0, 0): 0}
    for row, m in zip(tokens, mask):
        grid = [row[r * (w + 1): r * (w + 1) + w] for r in range(n_rows)]
        assert all(row[r * (w + 1) + w] == 2 for r in range(n_rows - 1))
        for a, b in zip(grid, grid[1:]):
            assert b == [table[(a[i - 1], a[i], a[(i + 1) % w])] for i in range(w)]
        assert m == [0] * (w + 1) + [0 if (i + 1) % (w + 1) == 0 else 1 for i in range(w + 1, len(row))]


@pytest.mark.parametrize("kind", P.KINDS)
def test_shuffled_control_keeps_tokens_and_mask(kind):
    tokens, mask = P.generate(kind, 60, seed=3)
    shuf, shuf_mask = P.generate(kind, 60, seed=3, shuffled=True)
    assert np.array_equal(mask, shuf_mask)
    assert all(Counter(a) == Counter(b) for a, b in zip(tokens.tolist(), shuf.tolist()))
    assert (tokens != shuf).mean() > 0.3
    pad = P.vocab_size(kind) - 1
    assert np.array_equal(tokens == pad, shuf == pad)          # PAD stays put


@pytest.mark.parametrize("kind", P.KINDS)
def test_deterministic_by_seed(kind):
    a, am = P.generate(kind, 30, seed=5)
    b, bm = P.generate(kind, 30, seed=5)
    c, _ = P.generate(kind, 30, seed=6)
    assert np.array_equal(a, b) and np.array_equal(am, bm) and not np.array_equal(a, c)
    assert a.max() < P.vocab_size(kind)


def test_mixture_rows_belong_to_one_kind_in_the_shared_vocabulary():
    spec = "dyck+stack+eca110+sort-shuffled"
    tokens, mask, which = P.mixture(spec, 200, seed=1, k=3, length=20)
    lay = P.mixture_layout(spec, k=3, length=20)
    assert tokens.shape == (200, lay["seq_len"]) == (200, 129)
    assert lay["vocab_size"] == 101 + 6 + 3 + 1 and tokens.max() <= lay["pad"]
    assert sorted(Counter(which.tolist()).values()) == [50] * 4
    assert np.array_equal(which, P.mixture(spec, 200, seed=1, k=3, length=20)[2])
    for row, m, w in zip(tokens.tolist(), mask.tolist(), which.tolist()):
        kind = ["dyck", "stack", "eca110", "sort"][w]
        o = dict(k=3, length=20) if kind == "dyck" else {}
        off, S, vocab = lay["offset"][kind], P.seq_len(kind, **o), P.vocab_size(kind, **o)
        body, tail = row[:S], row[S:]
        assert all(t == lay["pad"] for t in tail) and not any(m[S:])
        own = [vocab - 1 if t == lay["pad"] else t - off for t in body]
        assert all(0 <= t < vocab for t in own)
        if kind == "dyck":
            check_dyck(own, 3)
        elif kind == "stack":
            parts, answer, _ = split(own)
            assert answer == run_stack(parts[0])
        elif kind == "sort":
            counts = Counter(own)                 # shuffled x + SEP + sorted(x): one SEP, pairs
            assert counts.pop(SEP) == 1 and all(c % 2 == 0 for c in counts.values())
    assert "(" in P.decode(tokens[which == 0][0], spec, k=3, length=20)


def test_bad_spec_lists_kinds():
    for bad in ("dyk", "dyck+nope", "", "shuffled:"):
        with pytest.raises(ValueError, match="valid kinds: identity"):
            P.check_spec(bad)
    assert P.check_spec("dyck-shuffled+stack") == [("dyck", True), ("stack", False)]
    assert P.check_spec("shuffled:dyck+stack") == [("dyck", True), ("stack", True)]
    with pytest.raises(ValueError):
        P.generate("dyck", 2, L=3)


def test_help_names_what_each_prefix_takes():
    """train.py --help lists the stages from data.describe(): a procedural stage takes a KIND, a
    task or stream stage a NAME; only text: takes a PATH."""
    import data
    from data import tasks
    lines = data.describe()
    heads = [l.split()[0] for l in lines]
    assert {"text:PATH", "procedural:KIND", "task:NAME", "stream:NAME"} <= set(heads)
    assert not {"procedural:PATH", "task:PATH", "stream:PATH"} & set(heads)
    assert all(k in lines[heads.index("procedural:KIND")] for k in P.KINDS)
    assert all(k in lines[heads.index("stream:NAME")] for k in tasks.AUTHORS)
    with pytest.raises(ValueError, match="procedural:KIND, task:NAME, stream:NAME"):
        data.check_name("nonsense")
    data.check_name("stream:haystack")
    with pytest.raises(ValueError, match="stage 'stream:haystak'.*valid tasks: haystack"):
        data.check_name("stream:haystak")


def test_loader_corpus(capsys):
    c = P.load_procedural("union+dyck", None, seed=0, block_size=128, procedural_sequences=400)
    S = c.info["seq_len"]
    assert S - 1 <= 128 and c.info["options"]["L"] == 62 and "L=62" in capsys.readouterr().err
    assert len(c.train) == 400 * S and len(c.val) == 200 * S and c.train_mask.shape == c.train.shape
    assert c.vocab_size == 101 + 2 * P.DEFAULTS["dyck"]["k"] + 1 and c.info["tokenizer"] == f"procedural-{c.vocab_size}"
    tr, va = c.train.reshape(-1, S), c.val.reshape(-1, S)
    assert not set(map(bytes, tr)) & set(map(bytes, va))    # validation rows are fresh draws
    assert isinstance(c.decode(tr[0]), str)
    d = P.load_procedural("identity", None, seed=1, block_size=128, procedural_sequences=100)
    assert d.info["seq_len"] == 129 and d.vocab_size == 102 and d.info["options"]["L"] == 64
    e = P.load_procedural("identity", None, seed=1, block_size=128, procedural_sequences=100)
    assert np.array_equal(d.train, e.train) and not np.array_equal(
        d.train, P.load_procedural("identity", None, seed=2, procedural_sequences=100).train)
    # --procedural-vocab: the authors' algorithmic.py rows for their 2_4_16 model (V = 21, L = 20): symbols 1..20,
    # SEP 21, PAD 22; a Dyck row takes no V
    f = P.load_procedural("set", None, seed=1, block_size=40, procedural_sequences=100, procedural_vocab=21)
    rows = f.train.reshape(-1, 41)
    assert f.vocab_size == 23 and f.info["options"] == {"L": 20, "V": 21} and (rows[:, 20] == 21).all()
    assert set(np.unique(rows[:, :20])) <= set(range(1, 21)) and rows.max() == 22
    assert "V" not in P.load_procedural("dyck", None, block_size=127, procedural_sequences=50,
                                        procedural_vocab=21).info["options"]
