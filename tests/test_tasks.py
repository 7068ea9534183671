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
