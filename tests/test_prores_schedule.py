"""ProRes schedules over a whole run against the authors' training loop, re-derived step by step
(github.com/dandingsky/ProRes, torchrun_main.py:361-417 before the first update, 470-494 after
each one): every schedule, the fixed ones too, returns to alpha = 1 once the warmup of
P = T * L updates is over. A schedule of one's own (one entry in prores.SCHEDULES) is held to the
invariants every schedule keeps; only the authors' schedules are compared with their loop."""
import json
import math

import numpy as np
import pytest
import torch

import prores
from checkpoint import read_checkpoint
from model import GPT, GPTConfig

# our schedule name -> theirs (PRORES_SCHEDULE)
THEIRS = {"linear": "linear", "equal": "linear_equal", "reverse": "linear_reverse", "sqrt": "sqrt",
          "square": "square", "stagewise": "stagewise_0", "stagewise-1/L": "stagewise_L",
          "stagewise-1/sqrt(L)": "stagewise_sqrt_L", "stagewise-1/sqrt(l)": "stagewise_sqrt_l",
          "fixed-1/L": "fix_L", "fixed-1/sqrt(L)": "fix_sqrt_L", "fixed-1/sqrt(l)": "fix_sqrt_l"}


def authors_run(schedule, L, P, steps):
    """alpha of every layer at the forward of each update u = 0..steps-1, the way their loop
    holds it: computed once before the loop, then after each update while u <= P (a fixed
    schedule keeps its first values), and the plain model (alpha = 1) once u > P."""
    name = THEIRS[schedule]
    if name == "linear_equal":
        ends = np.full(L, float(P))
    else:
        ends = np.linspace(P // L, P, L)
        if name == "linear_reverse":
            ends = ends[::-1]
    l = np.arange(1, L + 1)
    floor = {"stagewise_0": 0.0, "stagewise_L": 1 / L, "stagewise_sqrt_L": math.sqrt(1 / L),
             "stagewise_sqrt_l": 1 / np.sqrt(l)}.get(name)
    fixed = {"fix_L": np.full(L, 1 / L), "fix_sqrt_L": np.full(L, 1 / math.sqrt(L)), "fix_sqrt_l": 1 / np.sqrt(l)}

    def compute(u):
        if name.startswith("linear"):
            return np.clip(u / ends, 0, 1)
        if name == "sqrt":
            return np.clip(np.sqrt(u / ends), 0, 1)
        if name == "square":
            return np.clip((u / ends) ** 2, 0, 1)
        start, width = np.concatenate(([0], ends[:-1])), np.diff(ends, prepend=0)
        return np.clip(floor + (1 - floor) * (u - start) / width, floor, 1)

    a = fixed[name] if name in fixed else compute(0)
    out, plain = [a], False
    for u in range(1, steps):
        if u <= P:
            if name not in fixed:
                a = compute(u)
        else:
            plain = True  # NORM_TYPE loses its _prores suffix: the branches are no longer scaled
        out.append(np.ones(L) if plain else a)
    return np.array(out)


@pytest.mark.parametrize("schedule", prores.SCHEDULES)
def test_every_schedule_matches_the_authors_loop_step_by_step(schedule):
    if schedule not in THEIRS:
        pytest.skip(f"{schedule!r} has no counterpart in the authors' code (THEIRS): nothing to compare it with")
    L, T = 6, 10
    steps = T * L + 15
    want = authors_run(schedule, L, T * L, steps)
    got = np.array([prores.alpha(t, L, T, schedule).tolist() for t in range(steps)])
    np.testing.assert_allclose(got, want, atol=1e-6)
    assert (got[-1] == 1).all()


@pytest.mark.parametrize("schedule", prores.FIXED)
def test_fixed_schedules_hold_through_the_warmup_then_return_to_one(schedule):
    L, T = 4, 5
    const = {"fixed-1/L": [0.25] * 4, "fixed-1/sqrt(L)": [0.5] * 4,
             "fixed-1/sqrt(l)": [1, 2 ** -0.5, 3 ** -0.5, 0.5]}[schedule]
    for t in (0, 1, 19, 20):                       # t <= T * L = 20: held
        assert prores.alpha(t, L, T, schedule).tolist() == pytest.approx(const)
    for t in (21, 22, 1000):                       # after: the plain model
        assert prores.alpha(t, L, T, schedule).tolist() == [1.0] * 4
    assert prores.ramp_steps(L, T, schedule) == 21
    assert prores.ramp_steps(4, 2.6, schedule) == 11   # T * L = 10.4: held through step 10


def test_the_hook_writes_a_fixed_schedule_until_its_hold_ends_then_stops():
    m = GPT(GPTConfig(block_size=8, vocab_size=17, n_layer=4, n_head=2, n_embd=8))
    hook = prores.ProRes(m, T=3, schedule="fixed-1/sqrt(l)")
    assert hook.end == 13
    for step in range(13):
        assert hook.update(step) and not hook.done
        assert m.residual_scale.tolist() == pytest.approx([1, 2 ** -0.5, 3 ** -0.5, 0.5])
    assert hook.update(13) and hook.done and m.residual_scale.eq(1).all()
    m.residual_scale.fill_(7.0)
    assert not hook.update(14) and m.residual_scale.eq(7).all()


def test_a_fixed_schedule_needs_T():
    for T in (None, 0, -1):
        with pytest.raises(ValueError, match="needs T > 0"):
            prores.alpha(0, 4, T, "fixed-1/L")
    with pytest.raises(ValueError, match="needs T > 0"):
        prores.ProRes(GPT(GPTConfig(block_size=8, vocab_size=17, n_layer=2, n_head=2, n_embd=8)), None, "fixed-1/L")
    assert torch.equal(prores.alpha(0, 4, 1, "fixed-1/L"), torch.full((4,), 0.25))


def check_invariants(schedule, L=5, T=4):
    """What every schedule keeps: float32 of shape (L,) in [0, 1] at every step, 1 for every layer from
    ramp_steps on, and a hook that writes exactly alpha into the model, then stops (done)."""
    end = prores.ramp_steps(L, T, schedule)
    for t in range(end + 5):
        a = prores.alpha(t, L, T, schedule)
        assert a.dtype == torch.float32 and a.shape == (L,) and bool(((a >= 0) & (a <= 1)).all()), (t, a)
        assert (t < end) or a.eq(1).all(), (t, a)
    m = GPT(GPTConfig(block_size=8, vocab_size=17, n_layer=L, n_head=2, n_embd=8))
    hook = prores.ProRes(m, T, schedule)
    for t in range(end + 1):
        hook.update(t)
        assert torch.equal(m.residual_scale, prores.alpha(t, L, T, schedule))
    assert hook.done


@pytest.mark.parametrize("schedule", prores.SCHEDULES)
def test_every_schedule_keeps_the_invariants(schedule):
    check_invariants(schedule)


def test_a_schedule_added_in_one_place_trains(monkeypatch, tmp_path, cache):
    """One entry in prores.SCHEDULES: the invariants hold, --prores-schedule takes it, and a run trains with it."""
    monkeypatch.setitem(prores.SCHEDULES, "cosine", (lambda t, l, L, T: 0.5 - 0.5 * torch.cos(math.pi * t / (T * l)),
                                                     False))
    check_invariants("cosine")
    import train
    out = tmp_path / "run"
    train.main(["--stages", "procedural:dyck", "--procedural-sequences", "200", "--block-size", "32",
                "--n-layer", "2", "--n-embd", "8", "--n-head", "2", "--batch-size", "4", "--iters", "6",
                "--eval-interval", "6", "--eval-iters", "1", "--prores", "--prores-T", "1",
                "--prores-schedule", "cosine", "--no-progress", "--no-plot", "--out", str(out)])
    ck = read_checkpoint(out / "stage0-procedural_dyck.pt", "test")
    assert json.loads((out / "summary.json").read_text())["args"]["prores_schedule"] == "cosine"
    assert torch.equal(ck["model"]["residual_scale"], torch.ones(2))  # the ramp (T L = 2 steps) has ended
