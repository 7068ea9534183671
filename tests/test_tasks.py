"""Diagnostic tasks (data/tasks.py): answers checked by plain python, masks, splits, and
exact-answer accuracy (teacher-forced argmax == greedy decoding)."""
import re

import numpy as np
import pytest

from data import tasks as T

SYM = {i: s for i, s in enumerate("0123456789+*=,?$_")}


def text(ids):
    """Digits and symbols as a string (keys and values of the haystack as <k3> and <v17>)."""
    return "".join(SYM.get(i) or (f"<k{i - 17}>" if i < 47 else f"<v{i - 46}>") for i in ids)


def solve(name, prompt):
    """The answer (without END) of a prompt string, computed here independently."""
    if name == "addition":
        a, b = prompt[:-1].split("+")
        return str(int(a) + int(b))
    if name == "reversed_addition":
        a, b = prompt[:-1].split("+")
        return str(int(a[::-1]) + int(b[::-1]))[::-1]
    if name == "multiplication":
        a, b = prompt[:-1].split("*")
        return str(int(a) * int(b))
    if name == "sorting":
        return ",".join(sorted(prompt[:-1].split(",")))
    pairs, query = prompt.split("?")
    keys = pairs.replace("><", ">,<").split(",")
    table = dict(zip(keys[0::2], keys[1::2]))
    assert len(table) == len(keys) // 2 <= 30              # distinct keys, at most 30 pairs
    return table[query]


@pytest.mark.parametrize("name", T.TASKS)
def test_records_answers_and_masks(name):
    tokens, mask = T.generate_task(name, 300, seed=0)
    assert tokens.dtype == np.uint16 and mask.dtype == np.uint8 and tokens.max() < T.VOCAB
    for row, m in zip(tokens.tolist(), mask.tolist()):
        start = m.index(1)
        n_ans = sum(m)
        assert m == [0] * start + [1] * n_ans + [0] * (len(row) - start - n_ans)   # one span
        assert all(t == T.PAD for t in row[start + n_ans:])
        prompt, answer = text(row[:start]), text(row[start:start + n_ans])
        if name == "haystack":
            assert answer == solve(name, prompt)
        else:
            assert answer == solve(name, prompt) + "$"     # no leading zeros, END last
        if name in ("addition", "reversed_addition", "multiplication"):
            a, b = re.split(r"[+*]", prompt[:-1])
            most_significant = -1 if name == "reversed_addition" else 0
            assert len(a) == len(b) == T.DEFAULTS[name]["digits"] and "0" not in (a[most_significant], b[most_significant])


def test_sequence_lengths_follow_the_authors():
    assert {n: T.generate_task(n, 2)[0].shape[1] for n in T.TASKS} == dict(
        haystack=63, addition=19, reversed_addition=34, multiplication=23, sorting=48)


def test_oracle_scores_one_and_constant_near_zero():
    for name in T.TASKS:
        tokens, mask = T.generate_task(name, 500, seed=1)
        y, m = tokens[:, 1:], mask[:, 1:]
        assert T.answer_accuracy(y, y, m) == 1.0
        assert T.answer_accuracy(np.full_like(y, 7), y, m) < 0.05
        off = y.copy()
        off[np.arange(len(y)), m.argmax(1)] += 1                # one wrong answer token per record
        assert T.answer_accuracy(off, y, m) == 0.0


def fake_model(tokens, mask):
    """A deterministic next-token function of the prefix: right on the prefixes of the records
    it was built from, except where a hash of the prefix says to err; a fixed guess elsewhere."""
    truth = {}
    for row in tokens.tolist():
        for t in range(1, len(row)):
            truth.setdefault(tuple(row[:t]), row[t])

    def next_token(prefix):
        out = []
        for p in np.asarray(prefix).tolist():
            h = sum((i + 1) * v for i, v in enumerate(p)) % 29
            guess = truth.get(tuple(p), 3)
            out.append(guess if h else (guess + 1) % T.VOCAB)
        return np.array(out)
    return next_token


@pytest.mark.parametrize("name", ["haystack", "addition", "sorting"])
def test_teacher_forced_accuracy_equals_greedy_decoding(name):
    tokens, mask = T.generate_task(name, 120, seed=2)
    fn = fake_model(tokens, mask)
    S = tokens.shape[1]
    pred = np.stack([fn(tokens[:, :t]) for t in range(1, S)], axis=1)   # teacher forcing
    fast = T.answer_accuracy(pred, tokens[:, 1:], mask[:, 1:])
    slow = T.greedy_decode_accuracy(fn, tokens, mask)
    assert fast == slow and 0.0 < fast < 1.0
    oracle = lambda prefix: np.array([tokens[np.all(tokens[:, :prefix.shape[1]] == p, 1)][0, prefix.shape[1]]
                                      for p in prefix])
    assert T.greedy_decode_accuracy(oracle, tokens[:20], mask[:20]) == 1.0


def test_split_is_fixed_and_disjoint():
    tr, trm, te, tem = T.task_split("addition", seed=0, n_train=3000, n_test=300)
    assert len(te) == 300 and not set(map(bytes, tr)) & set(map(bytes, te))
    tr2, _, te2, _ = T.task_split("addition", seed=0, n_train=3000, n_test=300)
    assert np.array_equal(tr, tr2) and np.array_equal(te, te2)
    # a tiny problem space: the test keeps only problems the training set does not have
    tr, _, te, _ = T.task_split("addition", n_train=30, n_test=10, digits=1)
    assert not set(map(bytes, tr)) & set(map(bytes, te))
    with pytest.raises(ValueError, match="not in the training set"):
        T.task_split("addition", n_train=500, n_test=50, digits=1)


def test_bad_names_list_the_valid_ones():
    with pytest.raises(ValueError, match="haystack, addition, reversed_addition, multiplication, sorting"):
        T.check_task("subtraction")
    with pytest.raises(ValueError, match="valid tasks"):
        T.generate_task("nope", 3)
    with pytest.raises(ValueError):
        T.generate_task("addition", 3, pairs=4)


def test_loader_corpus():
    c = T.load_task("reversed_addition", None, seed=0, task_train=500, task_test=100)
    S = c.info["seq_len"]
    assert c.info["tokenizer"] == "tasks-174" and c.vocab_size == 174 and c.info["task"] == "reversed_addition"
    assert len(c.train) == 500 * S and len(c.val) == 100 * S and c.val_mask.shape == c.val.shape
    row = c.train[:S]
    a, b = c.decode(row).split("=")[0].split("+")
    assert c.decode(row).startswith(f"{a}+{b}=" + str(int(a[::-1]) + int(b[::-1]))[::-1] + "$")
    assert T.decode(T.generate_task("haystack", 1)[0][0]).count("?") == 1


# ----------------------------------------------------------------------------------------------
# stream:NAME, the authors' diagnostics

def their_text(name, row):
    """A record of the authors' arithmetic layout as text: operand digits, the operator, '=', the
    answer digits (ids 20-29), ',' (31), '$' (stop 30), '_' (PAD 12), read here independently."""
    op = {"multiplication": "*", "sorting": ","}.get(name, "+")
    sym = {10: op, 11: "=", 12: "_", 30: "$", 31: ","}
    return "".join(str(i) if i < 10 else str(i - 20) if 20 <= i < 30 else sym[i] for i in row)


def their_solve(name, prompt):
    if name == "sorting":
        return ",".join(sorted(prompt[:-1].split(",")))
    a, b = prompt[:-1].split("*" if name == "multiplication" else "+")
    if name == "reversed_addition":
        return str(int(a[::-1]) + int(b[::-1]))[::-1]
    return str(int(a) * int(b) if name == "multiplication" else int(a) + int(b))


@pytest.mark.parametrize("name", [n for n in T.AUTHORS if n != "haystack"])
def test_their_arithmetic_layouts_and_answers(name):
    tokens, mask = T.generate_stream(name, 300, seed=0)
    assert tokens.shape == (300, T.AUTHORS[name]["seq_len"]) and tokens.max() < T.AUTHORS[name]["vocab"]
    for row in tokens.tolist():
        s = their_text(name, row)
        prompt, rest = s.split("=")[0] + "=", s.split("=", 1)[1]
        assert rest.rstrip("_") == their_solve(name, prompt) + "$" and set(rest.split("$")[1]) <= {"_"}
        assert all(t < 20 for t in row[:len(prompt)]) and all(t >= 20 for t in row[len(prompt):len(s.rstrip("_"))])
    digits = {"addition": 5, "reversed_addition": 10, "multiplication": 5}.get(name)
    if digits:   # operands of exactly `digits` digits, no leading zero (reversed: no trailing one)
        a, b = re.split(r"[+*]", their_text(name, tokens[0].tolist()).split("=")[0])
        lead = -1 if name == "reversed_addition" else 0
        assert len(a) == len(b) == digits and "0" not in (a[lead], b[lead])


def test_their_haystack_layout():
    tokens, mask = T.generate_stream("haystack", 400, seed=3)
    assert tokens.shape == (400, 63) and tokens.max() < 256
    n_pairs = []
    for row in tokens.tolist():
        q = next(i for i, t in enumerate(row) if t >= 158)            # the query, in its own range
        pairs = row[:q]
        keys, values = pairs[0::2], pairs[1::2]
        assert len(pairs) % 2 == 0 and all(128 <= k < 158 for k in keys) and all(1 <= v <= 127 for v in values)
        assert len(set(keys)) == len(keys) and row[q] - 30 in keys    # distinct keys; one of them is asked
        assert row[q + 1] == values[keys.index(row[q] - 30)] and set(row[q + 2:]) <= {0}
        n_pairs.append(len(keys))
    assert min(n_pairs) == 1 and max(n_pairs) == 30
    assert (mask.sum(1) == 1).all() and (tokens[:, :-1][mask[:, 1:] == 1] >= 158).all()


@pytest.mark.parametrize("name", list(T.AUTHORS))
def test_their_loss_mask_is_their_compute_loss_rule(name):
    """The authors' `wanted = labels[:, :-1] >= t` (input positions), moved onto the targets;
    the exact-answer span adds the first answer token, which theirs leaves out."""
    tokens, mask = T.generate_stream(name, 200, seed=1)
    t = T.AUTHORS[name]["scored_from"]
    wanted = tokens[:, :-1] >= t
    assert np.array_equal(mask[:, 1:].astype(bool), wanted) and not mask[:, 0].any()
    span = T.answer_span(name, tokens)
    if name == "haystack":
        assert np.array_equal(span, wanted)                          # one answer token: the same position
    else:
        first = span.argmax(1)                                       # the first answer token, predicted at '='
        assert not wanted[np.arange(200), first].any() and (tokens[np.arange(200), first] == 11).all()
        # theirs scores the PAD after a stop that is not the record's last token (sorting's always is)
        assert (wanted & ~span).any() == (name != "sorting")


def test_token_accuracy_against_exact_answers():
    """The authors' metric is pooled over positions and skips the first answer digit: an oracle
    that gets only that digit wrong scores 0 exact answers and 100% of theirs."""
    tokens, _ = T.generate_stream("addition", 100, seed=2)
    y, span, scored = tokens[:, 1:], T.answer_span("addition", tokens), T.their_loss_mask("addition", tokens)[:, 1:]
    assert T.answer_accuracy(y, y, span) == 1.0 and T.token_accuracy(y, y, scored) == 1.0
    off = y.copy()
    off[np.arange(100), span.argmax(1)] += 1
    assert T.answer_accuracy(off, y, span) == 0.0 and T.token_accuracy(off, y, scored) == 1.0
    off = y.copy()
    rows, cols = np.nonzero(scored)
    off[rows[0], cols[0]] += 1                                       # one scored position wrong
    assert T.token_accuracy(off, y, scored) == pytest.approx(1 - 1 / scored.sum())


def test_the_stream_never_yields_a_test_record():
    c = T.load_stream("haystack", None, seed=0, task_train=100, task_test=50)
    key = [5, 0, 7]
    fresh, _ = T.stream_records(c, key, 64)
    assert np.array_equal(fresh, T.stream_records(c, key, 64)[0])             # the step's key decides
    assert not np.array_equal(fresh, T.stream_records(c, [5, 0, 8], 64)[0])
    # a test set made of exactly the records this step would draw: every one is replaced
    drawn, drawn_mask = T.generate_stream("haystack", 64, key + [0, 2])
    assert np.array_equal(drawn, fresh)
    c.val, c.val_mask = drawn[:40].reshape(-1), drawn_mask[:40].reshape(-1)
    again, again_mask = T.stream_records(c, key, 64)
    assert not (set(map(bytes, again)) & set(map(bytes, drawn[:40])))
    assert np.array_equal(again[40:], drawn[40:])                             # the others are kept
    assert np.array_equal(again_mask, T.their_loss_mask("haystack", again))


def test_the_stream_loader():
    c = T.load_stream("reversed_addition", None, seed=4, task_train=300, task_test=120)
    S = c.info["seq_len"]
    assert (c.vocab_size, S, c.info["tokenizer"], c.info["stream"], c.info["layout"]) == (
        31, 34, "authors-reversed_addition-31", True, "authors")
    assert len(c.val) == 120 * S and len(c.train) == 300 * S
    test = c.val.reshape(-1, S)
    assert np.array_equal(test, T.load_stream("reversed_addition", None, seed=4, task_test=120).val.reshape(-1, S))
    assert not set(map(bytes, c.train.reshape(-1, S))) & set(map(bytes, test))
    assert np.array_equal(c.val_mask.reshape(-1, S), T.their_loss_mask("reversed_addition", test))
    assert c.decode(test[0]).count("+") == 1 and c.decode(test[0]).endswith(("$", "_"))
    with pytest.raises(ValueError, match="valid tasks: haystack, addition"):
        T.check_stream("subtraction")


def test_stream_batches_split_one_global_batch():
    """batches.get_batch on a stream corpus: the rows of 2 micro-batches (or 2 ranks) at batch B
    are the rows of 1 at batch 2B, the loss mask is the targets' mask, and no fixed training set
    exists to keep a part of (--unique-tokens is refused in one line)."""
    import torch
    from batches import get_batch, keep_unique_tokens
    from data.common import UserError
    c = T.load_stream("addition", None, seed=0, task_train=100, task_test=50)
    cpu = torch.device("cpu")
    x, y, m = get_batch(c, "train", 8, 40, [1, 0, 3], 0, 1, cpu)
    parts = [get_batch(c, "train", 4, 40, [1, 0, 3], 0, 1, cpu, micro=k, accum=2) for k in (0, 1)]
    ranks = [get_batch(c, "train", 4, 40, [1, 0, 3], r, 2, cpu) for r in (0, 1)]
    for split in (parts, ranks):
        assert all(torch.equal(torch.cat([p[i] for p in split]), t) for i, t in enumerate((x, y, m)))
    rows = torch.cat([x[:, :1], y], 1).numpy()
    assert torch.equal(m, torch.from_numpy(T.their_loss_mask("addition", rows)[:, 1:].astype(np.int64)))
    assert x.shape == (8, 18) and not torch.equal(x, get_batch(c, "train", 8, 40, [1, 0, 4], 0, 1, cpu)[0])
    with pytest.raises(UserError, match="stream of fresh records"):
        keep_unique_tokens(c, 1000)


def test_task_accuracy_on_the_authors_layout_is_exact_answers():
    """batches.task_accuracy scores the whole answer (answer_span), not the loss mask: a model that
    predicts every target right except the first answer digit gets 0."""
    from contextlib import nullcontext
    import torch
    from batches import task_accuracy
    c = T.load_stream("addition", None, seed=0, task_train=100, task_test=60)
    S = c.info["seq_len"]
    rows = np.asarray(c.val).reshape(-1, S).astype(np.int64)
    span = T.answer_span("addition", rows)

    class Oracle(torch.nn.Module):
        def __init__(self, miss_first):
            super().__init__()
            self.miss_first = miss_first

        def forward(self, idx):
            i = next(k for k in range(len(rows)) if np.array_equal(rows[k, :idx.shape[1]], idx[0].numpy()))
            y = rows[i:i + len(idx), 1:].copy()
            if self.miss_first:
                y[np.arange(len(y)), span[i:i + len(idx)].argmax(1)] = 0
            return torch.nn.functional.one_hot(torch.from_numpy(y), c.vocab_size).float(), None
    assert task_accuracy(Oracle(False), c, 20, torch.device("cpu"), nullcontext()) == 1.0
    assert task_accuracy(Oracle(True), c, 20, torch.device("cpu"), nullcontext()) == 0.0
