"""The papers' mechanisms as train.py runs them: MIR and MDLM through the one objective call,
the data-constrained budget (U, D, N in summary.json), ProRes over a whole curriculum, data
fixed across seeds, record corpora with loss masks and task accuracy, resume checks."""
import math

import numpy as np
import pytest
import torch

import prores
import machine
import train
from batches import get_batch, load_corpus
from conftest import write_paragraphs
from data.common import UserError
from flags import parse_args
from test_train import TINY, losses


def run(out, *flags):
    return train.run(parse_args(TINY + list(flags) + ["--out", str(out)]))


def test_mir_with_grad_accum_2_equals_mir_at_twice_the_batch(cache, text_dir, tmp_path):
    """Each row's masked copy is drawn from a generator keyed by its global row index, and a
    step's global batch is one draw: 2 micro-batches of 2 rows see what 1 batch of 4 sees."""
    common = ["--stages", f"text:{text_dir}", "--iters", "4", "--eval-interval", "4", "--mir",
              "--mir-keep-first", "2", "--lr", "1e-2"]
    run(tmp_path / "big", *common, "--batch-size", "4")
    run(tmp_path / "accum", *common, "--batch-size", "2", "--grad-accum", "2")
    a, b = losses(tmp_path / "big"), losses(tmp_path / "accum")
    assert a.keys() == b.keys() and len(a) == 4
    for k in a:
        assert a[k] == pytest.approx(b[k], rel=1e-5), k
    run(tmp_path / "plain", *[c for c in common if c != "--mir"], "--batch-size", "4")
    assert losses(tmp_path / "plain")[(0, 1)] < a[(0, 1)]  # the masked copy's term is added


def test_mir_records_the_data_constrained_budget_and_never_samples_mask(cache, text_dir, tmp_path):
    import sample
    out = tmp_path / "mir"
    s = run(out, "--stages", f"text:{text_dir}", "--mir", "--unique-tokens", "600", "--epochs", "3",
            "--iters", "50", "--eval-interval", "50")
    st = s["stages"][0]
    assert st["unique_tokens"] == 600 and st["objective"] == "mir"
    assert st["tokens"] == st["iters"] * 4 * 16 and st["iters"] == math.ceil(3 * 600 / 64)
    assert st["epochs"] == pytest.approx(st["tokens"] / 600)
    assert s["params"] > 0 and s["params_total"] > s["params"]
    ck = torch.load(next(out.glob("stage0-*.pt")), weights_only=True)
    assert ck["model_config"]["vocab_size"] == 50258 and ck["mask_id"] == 50257 and ck["vocab"] == 50257
    model, ck = sample.load_model(next(out.glob("stage0-*.pt")))
    with torch.no_grad():  # make [MASK] the most likely token everywhere: it must still never appear
        model.transformer.wte.weight[50257] = model.transformer.ln_f.weight.sign() * 5
    gen = torch.Generator().manual_seed(0)
    y = sample.generate(model, ck, [10], 40, 3, 1.0, None, gen, None)
    assert int(y.max()) < 50257


def test_mdlm_trains_a_bidirectional_model_whose_bound_drops(cache, text_dir, tmp_path):
    s = run(tmp_path / "mdlm", "--stages", f"text:{text_dir}", "--objective", "mdlm", "--iters", "30",
            "--eval-interval", "15", "--lr", "1e-2")
    st = s["stages"][0]
    assert st["objective"] == "mdlm" and st["val_loss_kind"] == "nll bound"
    assert st["val_loss"] < math.log(50257)
    ck = torch.load(next((tmp_path / "mdlm").glob("stage0-*.pt")), weights_only=True)
    assert ck["model_config"]["causal"] is False and ck["objective"] == "mdlm"
    with pytest.raises(SystemExit):
        parse_args(["--objective", "mdlm", "--mir"])


def test_prores_scope_run_never_lowers_alpha_at_a_stage_boundary(cache, tmp_path, monkeypatch):
    """--prores-scope run with T auto: T comes from the whole run's steps, so alpha keeps rising
    across stages of different lengths instead of dropping back at the boundary."""
    small, large = write_paragraphs(tmp_path / "small", 40, seed=1), write_paragraphs(tmp_path / "large", 160, seed=2)
    seen = []
    update = prores.ProRes.update

    def spy(self, step):
        out = update(self, step)
        seen.append((step, self.T, self.model.residual_scale.clone()))
        return out
    monkeypatch.setattr(prores.ProRes, "update", spy)
    s = run(tmp_path / "r", "--stages", f"text:{small},text:{large}", "--epochs", "1", "--prores",
            "--prores-scope", "run", "--eval-interval", "1000", "--n-layer", "3")
    iters = [st["iters"] for st in s["stages"]]
    assert iters[0] != iters[1]
    assert {T for _, T, _ in seen} == {max(1, round(sum(iters) / 6))}
    assert [t for t, _, _ in seen] == list(range(sum(iters)))
    for (_, _, a), (_, _, b) in zip(seen, seen[1:]):
        assert (b >= a).all()


def test_same_data_seed_same_music_data_whatever_the_seed(cache, tmp_path):
    def corpus(*flags):
        args = parse_args(["--stages", "music-synthetic", "--synthetic-tokens", "20000",
                                 "--music-chunks", "40", "--block-size", "32"] + list(flags))
        return np.asarray(load_corpus("music-synthetic", args).train)
    a, b = corpus("--seed", "1"), corpus("--seed", "2")
    assert np.array_equal(a, b)
    assert not np.array_equal(a, corpus("--seed", "1", "--data-seed", "1"))


def test_record_corpora_train_on_answers_and_report_task_accuracy(cache, tmp_path):
    s = run(tmp_path / "t", "--stages", "procedural:sort,task:sorting", "--iters", "3", "--eval-interval", "3",
            "--task-train", "200", "--task-test", "50", "--procedural-sequences", "200", "--block-size", "64",
            "--transfer", "full", "--embed-init", "mean", "--freeze", "attn")
    proc, task = s["stages"]
    assert proc["vocab_size"] == 102 and proc["tokenizer"] == "procedural-102"
    assert 0.0 <= task["accuracy"] <= 1.0 and task["tokenizer"].startswith("tasks-")
    ck = torch.load(tmp_path / "t" / "stage0-procedural_sort.pt", weights_only=True)["model"]
    ck2 = torch.load(tmp_path / "t" / "stage1-task_sorting.pt", weights_only=True)["model"]
    attn = [k for k in ck if ".attn." in k]
    assert attn and all(torch.equal(ck[k], ck2[k]) for k in attn)          # frozen after transfer
    assert not torch.equal(ck["transformer.h.0.mlp.c_fc.weight"], ck2["transformer.h.0.mlp.c_fc.weight"])  # trained
    x, y, m = get_batch(load_corpus("procedural:sort", parse_args(
        ["--stages", "procedural:sort", "--procedural-sequences", "200", "--block-size", "64"])),
        "train", 4, 64, [0], 0, 1, torch.device("cpu"))
    assert x.shape == (4, 64) and m.shape == (4, 64) and 0 < int(m.sum()) < m.numel()


def test_resume_with_other_model_flags_is_a_clear_error(cache, text_dir, tmp_path):
    out = tmp_path / "r"
    common = ["--stages", f"text:{text_dir}", "--iters", "2", "--eval-interval", "2", "--out", str(out)] + TINY
    train.run(parse_args(common))
    i = common.index("--n-layer")
    changed = common[:i + 1] + ["3"] + common[i + 2:]
    with pytest.raises(UserError, match="--n-layer 3 .*checkpoint's run: 2"):
        train.run(parse_args(changed + ["--resume"]))
    train.run(parse_args(common + ["--resume", "--no-progress", "--threads", "1", "--loss-impl", "standard"]))  # harmless


def test_loss_impl_auto_is_standard_only_where_a_gpu_compiles_it():
    names = ("auto", "fused", "standard")
    for dev, compiled in (("cpu", False), ("cpu", True), ("cuda", False)):
        assert [machine.resolve_loss_impl(n, torch.device(dev), compiled) for n in names] == ["fused", "fused", "standard"]
    assert [machine.resolve_loss_impl(n, torch.device("cuda"), True) for n in names] == ["standard", "fused", "standard"]


def test_patience_stops_a_stage_at_a_plateau(cache, text_dir, tmp_path):
    s = run(tmp_path / "p", "--stages", f"text:{text_dir}", "--iters", "200", "--eval-interval", "1",
            "--patience", "1", "--lr", "0", "--min-lr", "0", "--warmup-iters", "0")
    st = s["stages"][0]
    assert st["stopped_early"] == 2 and st["iters"] == 2  # lr 0: the second eval cannot improve


def test_min_delta_counts_only_improvements_larger_than_it(cache, text_dir, tmp_path):
    """The loss falls at every evaluation (lr 3e-3, the first steps), but never by 5 nats: with --min-delta 5 the
    second evaluation is not an improvement; without it the stage trains on."""
    flags = ("--stages", f"text:{text_dir}", "--iters", "4", "--eval-interval", "1", "--patience", "1",
             "--warmup-iters", "0")
    assert run(tmp_path / "d", *flags, "--min-delta", "5")["stages"][0]["stopped_early"] == 2
    assert run(tmp_path / "n", *flags)["stages"][0]["stopped_early"] is None
