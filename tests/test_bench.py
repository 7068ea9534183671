"""bench.py --tiny: it runs end to end at a very small batch and ends with fraction_of_matmul=;
what it times computes what the training loop computes (its baseline loss is the model's, its
batched seeds train as the same seeds trained one by one). No timing is asserted."""
import pytest
import torch

import bench
from model import GPT, GPTConfig


def test_tiny_mode_runs_and_prints_fraction_of_matmul_last(capsys):
    threads = torch.get_num_threads()
    bench.main(["--tiny", "--tiny-batch", "4", "--rounds", "1", "--no-compile", "--tiny-seeds", "2"])
    assert torch.get_num_threads() == threads        # the stages' thread counts are not left behind
    lines = capsys.readouterr().out.strip().splitlines()
    assert lines[-1].startswith("fraction_of_matmul=")
    assert float(lines[-1].split("=")[1]) > 0
    text = "\n".join(lines)
    for stage in ("1. thread count", "2. each candidate alone", "the last norm, head and loss alone",
                  "3. the kept candidates", "4. 2 seeds"):
        assert stage in text
    assert "76,416" in text                          # the FLOP count it states


@pytest.mark.parametrize("argv, words", [(["--tiny", "--tiny-batch", "0"], ["--tiny-batch"]),
                                         (["--tiny", "--tiny-seeds", "0"], ["--tiny-seeds"]),
                                         (["--tiny", "--tiny-mask", "sparse"], ["--tiny-mask", "haystack"])])
def test_tiny_errors_are_one_line(argv, words, capsys):
    with pytest.raises(SystemExit) as e:
        bench.main(argv)
    err = [l for l in capsys.readouterr().err.splitlines() if l.strip()]
    assert e.value.code != 0 and len(err) == 1 and all(w in err[0] for w in words), err


def test_tiny_flop_count_is_the_models():
    m = GPT(GPTConfig(**bench.TINY))
    n = m.get_num_params() + m.lm_head.weight.numel()
    assert n == 8640 and m.flops_per_token() == 6 * 8640 + 12 * 2 * 64 * 16 == 76416


@pytest.mark.parametrize("mask", ["haystack", "dense"])
def test_the_baseline_loss_is_the_models_loss(mask):
    """loss_scoring_every_row (what the counted positions are timed against) = GPT.forward's loss and gradients."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(**bench.TINY))
    batch = bench.tiny_batch(6, mask)
    if mask == "haystack":
        assert (batch[2].sum(1) == 1).all()          # one counted target per row
    res = []
    for fn in (bench.loss_scoring_every_row, bench.gpt_loss):
        m.zero_grad(set_to_none=True)
        loss = fn(m, *batch)
        loss.backward()
        res.append((loss.item(), [p.grad.clone() for p in m.parameters()]))
    assert res[0][0] == pytest.approx(res[1][0], rel=1e-6)
    for a, b in zip(res[0][1], res[1][1]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-7)


def test_batched_seeds_train_as_the_same_seeds_one_by_one():
    """SeedBatch: K seeds stacked and vmapped take the same two steps as K separate models
    (own init, own batch, clipping by each seed's own gradient norm, AdamW)."""
    K, threads = 3, torch.get_num_threads()
    batches = [bench.tiny_batch(5, "haystack", seed=k) for k in range(K)]
    batched = bench.SeedBatch(batches, threads, range(K))
    singles = [bench.TinyRun(bench.Tiny("one", threads, gather=True), b, seed=k) for k, b in enumerate(batches)]
    losses, norms = batched.step()                    # a TinyRun takes its first step when built
    for k, run in enumerate(singles):
        assert losses[k] == pytest.approx(run.first_step[0], rel=1e-5)
        assert norms[k] == pytest.approx(run.first_step[1], rel=1e-4)
    batched.step()
    for run in singles:
        run.step()
    for k, run in enumerate(singles):
        for name, p in run.model.named_parameters():
            torch.testing.assert_close(batched.params[name][k], p.detach(), rtol=1e-4, atol=1e-6, msg=name)
    assert len(set(losses)) == K                    # three seeds, not one model three times


def test_head_chunks_times_the_rule_against_512_rows():
    """bench.py --head-chunks at a small row count: each width timed both ways, the rule's rows
    those of lm_loss.chunk_rows (16 at d16 with GPT-2's vocabulary on this 1-thread test run)."""
    res = bench.head_chunks(torch.device("cpu"), 1, widths=(16, 64), rows=32)
    assert res[16][2] == 16 and res[64][2] == 512
    assert all(fixed > 0 and rule > 0 for fixed, rule, _ in res.values())


def test_compiled_variants_each_trace_their_own_loss_on_a_shared_model(graphs):
    """bench.py --compiled: the standard and the fused variant share one model, each through its own
    torch.compile. The loss_impl each sets must reach its graph (a guard: two graphs, none retraced
    when they alternate), and both give the eager loss."""
    counting, graphs = graphs
    torch.manual_seed(0)
    m = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=16))
    opt = torch.optim.SGD(m.parameters(), lr=0.0)
    x, y, cpu = torch.randint(0, 64, (2, 16)), torch.randint(0, 64, (2, 16)), torch.device("cpu")
    eager = bench.Variant("eager", "standard", torch.float32).step(m, opt, x, y, cpu)
    std = bench.Variant("standard compiled", "standard", torch.float32, "", counting)
    fused = bench.Variant("fused compiled", "fused", torch.float32, "", counting)
    losses = [v.step(m, opt, x, y, cpu) for v in (std, fused, std, fused)]
    assert losses == pytest.approx([eager] * 4, rel=1e-5)
    assert len(graphs) == 2
    m2 = GPT(GPTConfig(block_size=16, vocab_size=64, n_layer=1, n_head=2, n_embd=16))  # the next shape's model
    eager2 = bench.Variant("eager", "standard", torch.float32).step(m2, opt, x, y, cpu)
    assert std.step(m2, opt, x, y, cpu) == pytest.approx(eager2, rel=1e-5) and abs(eager2 - eager) > 1e-3


def test_compiled_variants_compile_every_shape(graphs, monkeypatch):
    """A model's forward keeps at most 8 compiled graphs: without a fresh start per shape, the fifth
    shape's two variants would run eager and be timed as compiled."""
    counting, graphs = graphs
    shapes = {f"t{i}": (64, 1, 2, 8 * (i + 1), 2, 16) for i in range(5)}
    monkeypatch.setattr(bench, "SHAPES", shapes)
    variants = [bench.Variant("standard fp32", "standard", torch.float32),
                bench.Variant("standard compiled", "standard", torch.float32, "", counting),
                bench.Variant("fused compiled", "fused", torch.float32, "", counting)]
    for name in shapes:
        rows = bench.bench_shape(name, torch.device("cpu"), variants, 1, {torch.float32: 1e9})
        assert [r[1] for r in rows] == [v.name for v in variants]
    assert len(graphs) == 2 * len(shapes)


def test_against_imports_model_py_at_a_revision_and_names_a_bad_one():
    """bench.py --against REV: model.py as the revision has it, as a module of its own beside today's."""
    import subprocess
    if subprocess.run(["git", "rev-parse", "HEAD"], cwd=bench.Path(bench.__file__).parent,
                      capture_output=True).returncode:
        pytest.skip("not a git checkout")
    old = bench.model_at("HEAD")
    assert old.GPT is not GPT and old.__name__ == "model_at_HEAD"
    torch.manual_seed(0)
    a = old.GPT(old.GPTConfig(block_size=8, vocab_size=17, n_layer=2, n_head=2, n_embd=8))
    torch.manual_seed(0)
    b = GPT(GPTConfig(block_size=8, vocab_size=17, n_layer=2, n_head=2, n_embd=8))
    x = torch.randint(0, 17, (2, 8))
    assert torch.allclose(a(x, x)[1], b(x, x)[1])
    with pytest.raises(ValueError, match="--against no-such-rev"):
        bench.model_at("no-such-rev")
