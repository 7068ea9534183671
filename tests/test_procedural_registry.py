"""Extending the procedural registry cannot move other data: every kind's rows are seeded by its
name, so a kind added anywhere in data.procedural.KINDS (at the front, the obvious place next to
`identity`) changes no other kind's bytes, and today's kinds keep the bytes they had when the
committed reports were made (the digests below were taken then)."""
import hashlib

import numpy as np
import pytest

from data import procedural as P

# sha256 (first 16 hex digits) of generate(kind, 40, seed=(5, 0)) tokens + mask, and of its shuffled
# control; and of one mixture. Taken before the registry was keyed by name (the kinds were seeded by
# their index in a tuple then): they must never change.
PINNED = {
    "identity": "8ab96ec0897df677", "identity-shuffled": "7059d016d0572089",
    "reverse": "76e0848b840717c3", "reverse-shuffled": "184abb958422fe46",
    "sort": "b9593f0c69c9405e", "sort-shuffled": "1cbf3650af13b150",
    "set": "b25cc68e061ea253", "set-shuffled": "96903af70aa8a38a",
    "union": "1bb146b8f30f04c3", "union-shuffled": "0ed4ca04c660bc4d",
    "delete": "81a83e6a772156ac", "delete-shuffled": "b88f8cd2ea4eea28",
    "stack": "cf6759eabb3d3edf", "stack-shuffled": "6c461f2bf7c6134f",
    "dyck": "342f4340dda490e1", "dyck-shuffled": "3f96ee03df1ee5ab",
    "dyck_shuffle": "51658f5705dde909", "dyck_shuffle-shuffled": "9d80c1b2d47bddfc",
    "eca110": "c23581c2bbe75277", "eca110-shuffled": "3c98274ccf73e6ee",
    "mixture": "a482855ff21072ff",
}
MIXTURE = "eca110+dyck+stack-shuffled+set"


def digest(*arrays):
    h = hashlib.sha256()
    for a in arrays:
        h.update(np.ascontiguousarray(a).tobytes())
    return h.hexdigest()[:16]


def digests(kinds):
    out = {}
    for k in kinds:
        out[k] = digest(*P.generate(k, 40, seed=(5, 0)))
        out[k + "-shuffled"] = digest(*P.generate(k, 40, seed=(5, 0), shuffled=True))
    out["mixture"] = digest(*P.mixture(MIXTURE, 64, seed=(5, 1)))
    return out


def test_todays_kinds_keep_todays_bytes():
    assert set(P.KINDS) >= {k for k in PINNED if "-" not in k and k != "mixture"}
    assert digests([k for k in PINNED if "-" not in k and k != "mixture"]) == PINNED


def _countdown(rng, n, L, V):
    """A sequence transform for the test: x + SEP + x sorted from largest to smallest."""
    x = rng.integers(1, V, (n, L))
    return np.hstack([x, np.full((n, 1), V)]), -np.sort(-x, axis=1)


def test_a_kind_added_at_the_front_changes_no_other_kinds_rows(monkeypatch):
    monkeypatch.setattr(P, "KINDS", {"countdown": "seq", **P.KINDS})
    monkeypatch.setitem(P.TRANSFORMS, "countdown", _countdown)
    assert list(P.KINDS)[0] == "countdown"
    assert digests([k for k in PINNED if "-" not in k and k != "mixture"]) == PINNED
    tokens, mask = P.generate("countdown", 8, seed=3)             # the new kind itself works
    L = P.DEFAULTS["countdown"]["L"]
    assert tokens.shape == (8, P.seq_len("countdown")) == (8, 2 * L + 1)
    assert (np.diff(tokens[:, L + 1:].astype(int), axis=1) <= 0).all() and mask[:, L + 1:].all()
    _, _, which = P.mixture("countdown+dyck", 10, seed=0)         # and mixes like any kind
    assert sorted(set(which.tolist())) == [0, 1]
    assert P.stream_of("countdown") not in {P.stream_of(k) for k in PINNED if "-" not in k and k != "mixture"}


def test_a_kind_without_its_generator_is_refused_in_one_line(monkeypatch):
    monkeypatch.setattr(P, "KINDS", {"countdown": "seq", **P.KINDS})
    with pytest.raises(ValueError, match="countdown.*TRANSFORMS"):
        P.generate("countdown", 4)
