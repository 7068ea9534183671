"""
ProRes' claims as data (Chen et al., "Progressive Residual Warmup for Language Model Pretraining",
arXiv 2603.05369; the depth claims: its sec. 4.4 and Figure 1), read by experiments/lib/claims.py from
the flat records of records(report): a record per run (growth_b: the slope b of lib/prores_report.growth_fit),
its two arms paired by seed (they share initial weights and batches).
The depth claims read two things: does the baseline degrade with depth (each seed's baseline at depth L
against the same seed's baseline at the shallowest depth L0: derived records of arm "baseline at L0"),
and, where it clearly does (`degrades`, set on both arms' records at that depth by the same rule), is
ProRes better than the baseline there. The arms are the authors' (dandingsky/ProRes; experiments/prores.py):
LNS is their `lns` (`lns-init` here: norm weights from 1/sqrt(l), modeling_llama.py:289-293, 308-313).
"""

from dataclasses import replace

from experiments.lib.claims import Claim
from experiments.lib.significance import compare

OTHERS = ("sandwich", "deepnorm", "lns", "lns-init")
OPEN_STREAM = ("pre", "sandwich", "lns", "lns-init")  # no norm on the residual stream: its RMS can grow


def arm(norm, prores, **more):
    return {"norm": norm, "arm": "ProRes" if prores else "baseline", **more}


def lower_loss(norms, name):
    return Claim(f"ProRes lowers the loss with {name}", "lower perplexity at every size, 71M-7B parameters",
                 treat=[arm(n, True) for n in norms], base=[arm(n, False) for n in norms], metric="val_loss",
                 cells="depth", label="L = {}", note="final val loss (nats), ProRes vs baseline")


def degrades(norm, name):
    return Claim(f"Without ProRes, {name} degrades with depth",
                 "Pre-LN degrades at depth (71M parameters, 24-120 layers)" if norm == "pre" else
                 f"not stated for {name} (the paper states it for Pre-LN)",
                 treat=arm(norm, False), base={"norm": norm, "arm": "baseline at L0"}, metric="val_loss",
                 lower_is_better=False, cells="depth", label="L = {}",
                 note="baseline's final val loss at L vs the same seed's at the shallowest depth")


def prevents(norm, name):
    return Claim(f"ProRes prevents the deep breakdown of {name}",
                 "stable at 120 layers where Pre-LN degrades (71M parameters, 24-120 layers)",
                 treat=arm(norm, True, degrades=True), base=arm(norm, False, degrades=True), metric="val_loss",
                 cells="depth", label="L = {}", note="read only where the baseline degrades")


def pooled(claim, paper, metric, note, fmt="{:.1f}", **flt):
    """ProRes against the baseline with every placement together, paired by (placement, seed)."""
    return Claim(claim, paper, treat={"arm": "ProRes", **flt}, base={"arm": "baseline", **flt}, metric=metric,
                 cells="depth", label="L = {}", pair_by=("norm", "seed"), fmt=fmt, note=note)


CLAIMS = [
    lower_loss(("pre",), "Pre-LN"), lower_loss(("post",), "Post-LN"), lower_loss(OTHERS, "Sandwich-LN, DeepNorm and LNS"),
    degrades("pre", "Pre-LN"), prevents("pre", "Pre-LN"), degrades("post", "Post-LN"), prevents("post", "Post-LN"),
    pooled("ProRes has fewer loss spikes", "almost no loss spikes", "loss_spikes", "steps whose loss exceeds {loss}"),
    pooled("ProRes has fewer gradient spikes", "almost no gradient spikes", "grad_spikes",
           "steps whose gradient norm exceeds {grad}"),
    pooled("ProRes lowers the largest gradient norm", "almost no gradient spikes", "max_grad_norm_after_warmup",
           "the largest pre-clipping gradient norm after the lr warmup", fmt="{:.2f}"),
    pooled("ProRes slows the growth of activation norms with depth",
           "activation norms grow linearly with depth instead of exponentially", "growth_b",
           "b of log RMS = a + b l over the blocks, per run; placements without a norm on the residual stream",
           fmt="{:.4f}", open_stream=True),
    Claim("ProRes raises zero-shot accuracy", "+1.27% average zero-shot accuracy", treat={"kind": "downstream"},
          base={"kind": "downstream"}, metric="accuracy", lower_is_better=False)]


def loss_rule(sd, factor="{:g}"):
    """What a loss spike exceeds by a report's spike_definition (the rules of lib/prores_report.spike_steps)."""
    med = f"the median of the previous {sd['window']}"
    return (f"{med} by more than {sd['loss_mads']:g} x 1.4826 MAD of those steps" if sd.get("loss_mads") is not None else
            f"{factor.format(sd['loss_factor'])} x {med}")


def with_spike_rule(sd):
    """CLAIMS with the spike claims' notes stating the report's own spike rule."""
    rules = dict(loss=loss_rule(sd), grad=f"{sd['grad_factor']:g} x the median of the previous {sd['window']}")
    return [replace(c, note=c.note.format(**rules) + ", per run") if "spikes" in c.metric else c for c in CLAIMS]


def records(report):
    """The flat records the claims read, from report.json's `runs` alone (see the module docstring)."""
    out = [dict(arm(r["norm"], r["prores"]), depth=r["depth"], seed=r["seed"], val_loss=r["val_loss"],
                loss_spikes=r["loss_spikes"], grad_spikes=r["grad_spikes"], growth_b=(r.get("act_fit") or {}).get("b"),
                max_grad_norm_after_warmup=r.get("max_grad_norm_after_warmup"), open_stream=r["norm"] in OPEN_STREAM,
                degrades=False) for r in report["runs"]]
    for norm in sorted({r["norm"] for r in out if r["arm"] == "baseline"}):
        base = [r for r in out if r["norm"] == norm and r["arm"] == "baseline"]
        d0 = min(r["depth"] for r in base)
        at_d0 = {r["seed"]: r["val_loss"] for r in base if r["depth"] == d0}
        for d in sorted({r["depth"] for r in base} - {d0}):
            deep = [r for r in base if r["depth"] == d and r["seed"] in at_d0]
            ref = [dict(norm=norm, arm="baseline at L0", depth=d, seed=r["seed"], val_loss=at_d0[r["seed"]]) for r in deep]
            c = compare(deep, ref, "val_loss", lower_is_better=False)
            for r in out:
                if (r["norm"], r["depth"]) == (norm, d):
                    r["degrades"] = bool(c["clear"] and c["better"])
            out += ref
    return out
