"""Shared fixtures: small corpora made on the spot (tests never touch the network or the
user's cache)."""
import random
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

WORDS = ("the river runs under a quiet hill where old songs of the morning wake and "
         "every small light of the town turns toward the sea while winds carry rain").split()


def gens(seeds):
    """One seeded torch.Generator per row (the masking objectives take a generator per row)."""
    return [torch.Generator().manual_seed(s) for s in seeds]


def token_batch(vocab, B=4, T=16, seed=1):
    """(x, y): B random windows of T + 1 tokens below vocab, shifted by one."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(0, vocab, (B, T + 1), generator=g)
    return w[:, :-1], w[:, 1:]


def help_text(main, capsys):
    """What `main(["--help"])` prints, its whitespace folded (argparse wraps it to the terminal)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    return " ".join(capsys.readouterr().out.split())


def write_paragraphs(folder, n_paragraphs=60, seed=0):
    """A folder with two .txt files of short English-like paragraphs."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for f in range(2):
        paras = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(20, 40))).capitalize() + "."
                 for _ in range(n_paragraphs // 2)]
        (folder / f"part{f}.txt").write_text("\n\n".join(paras))
    return folder


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh, empty cache folder for prepared corpora."""
    d = tmp_path / "cache"
    monkeypatch.setenv("PRELUDE_CACHE", str(d))
    return d


@pytest.fixture
def text_dir(tmp_path):
    return write_paragraphs(tmp_path / "texts")


@pytest.fixture
def no_network(monkeypatch):
    """Any attempt to open a network connection fails the test."""
    import socket

    def refuse(*a, **k):
        raise AssertionError("a test tried to reach the network")
    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)


@pytest.fixture(autouse=True)
def one_thread():
    """The tests' models are tiny: on one thread they run many times faster than on two busy
    shared cores (thread hand-offs dominate). Set before every test, since a train.run call with
    --threads leaves its own count behind (a test reading the count would depend on the order)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture
def graphs():
    """A torch.compile backend that keeps each graph it is handed and runs it as traced: (backend,
    the graphs so far). Dynamo's caches are reset before and after, so counts do not leak between tests."""
    torch._dynamo.reset()
    seen = []

    def backend(gm, example_inputs):
        seen.append(gm)
        return gm.forward

    yield backend, seen
    torch._dynamo.reset()
