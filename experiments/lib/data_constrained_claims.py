"""
The claims of Xu et al., "Data-Constrained Language Model Pretraining: Improved Regularization and Scaling Laws",
arXiv 2606.06888 (its results on MIR, the SoftQ law and dLLMs), read by claims.py. MIR as the authors'
dcp/train4_diffusionauxiliary_impl.py (:439-454, :513-527); their dLLM arms: their default decay 0.1
(dcp/train4_diffusionauxiliary_ddc_impl.py:77) against the decay tuned for AR at each size (scripts/ddc_*_largewd.sh:16-18).
records(report): a record per finished grid run (N: the size's baseline N), a law's error per cell, the log multiplier
per cell beside ln 1.3 (arm "paper": the paired test against it is the one-sample test), the fan-out gap per (size,
seed), MDLM per (size, U, seed) at the weak and at the AR-tuned decay (whatever its method's name) and its gap to wd.
Seeds at U <= 64k: per size, the pairs a paired t-test needs for 80% power at alpha 0.05 at the mean and sd of MIR's
gain in the 2-seed runs at U <= 64k (L2d32 10, L3d48 10, L4d64 21, L4d96 8); the most over 2 budgets, 11 seeds, capped 8.
"""

import math

from experiments.lib.claims import Claim

AR_METHODS, PAPER_MULTIPLIER = ("wd", "wd+mir", "ar-weak"), 1.3  # the law and fan-out claims: the paper's for AR
MIR_VS_WD = dict(treat={"kind": "run", "method": "wd+mir"}, base={"kind": "run", "method": "wd"})
MULT = lambda arm: {"kind": "multiplier", "law": "softq", "arm": arm}  # noqa: E731
MULTIPLIER = dict(treat=MULT("wd+mir"), metric="log_m", lower_is_better=False, pair_by=("size", "U"))
GAIN = "0.006 nats lower at 72M up to 0.03 at 1.4B parameters"
PAPER_GAIN = -0.006  # the paper's gain at its smallest size (72M), the nearest to ours, in nats
law = lambda fit, name: {"kind": "law_error", "fit": fit, "law": name}  # noqa: E731
LAW = dict(metric="abs_err", cells="method", only=AR_METHODS, pair_by=("size", "U"), fmt="{:.4f}")

CLAIMS = [
    Claim("MIR lowers the validation loss at every size", GAIN, **MIR_VS_WD, cells="size", pair_by=("U", "seed"),
          fmt="{:.4f}", paper_value=PAPER_GAIN),
    Claim("MIR's gain grows with model size", "~0.019 nats per decade of N (0.006 at 72M, 0.03 at 1.4B)",
          **MIR_VS_WD, slope="N", log_x=True, pair_by=("size", "U", "seed"), paper_value=0.019),
    Claim("MIR helps most where unique data is scarcest (its gain falls as U grows)",
          "not stated: the paper reads the gain against N (it grows with size), not against U", **MIR_VS_WD,
          slope="U", log_x=True, falls=True, pair_by=("size", "U", "seed")),
    Claim("MIR lowers the validation loss over the whole grid", GAIN, **MIR_VS_WD, pair_by=("size", "U", "seed"),
          fmt="{:.4f}", paper_value=PAPER_GAIN),
    Claim("MIR lowers the validation loss at every data budget", f"at every size ({GAIN}); not stated by U",
          **MIR_VS_WD, cells="U", label="U = {:,}", pair_by=("size", "seed"), fmt="{:.4f}", paper_value=PAPER_GAIN),
    Claim("MIR is worth more unique data (effective-data multiplier)", "~1.3x under the baseline's SoftQ fit",
          base=MULT("wd"), **MULTIPLIER, paper_value=round(math.log(PAPER_MULTIPLIER), 3),
          note="log multiplier by cell, MIR's against the baseline's own cells"),
    Claim("MIR is worth at least the paper's ~1.3x more unique data", "~1.3x (log 0.262)", base=MULT("paper"),
          **MULTIPLIER, note="log multiplier by cell against ln 1.3 (the one-sample t-test)"),
    Claim("SoftQ fits better than Chinchilla", "SoftQ fits best", treat=law("in_sample", "softq"),
          base=law("in_sample", "chinchilla"), **LAW, note="absolute error per seed-averaged cell"),
    Claim("SoftQ extrapolates better than Chinchilla (largest U held out)", "SoftQ extrapolates best",
          treat=law("extrapolation", "softq"), base=law("extrapolation", "chinchilla"), **LAW,
          note="absolute error per held-out cell"),
    Claim("the loss gap between data budgets grows with model size (fan-out)",
          "the gap grows with N (why Chinchilla is mis-specified)", treat={"kind": "fan_gap"}, cells="method",
          only=AR_METHODS, metric="gap", slope="N", log_x=True, note="L(smallest U) - L(largest U) per (size, seed)"),
    Claim("strong decay tuned for AR improves the masked-diffusion model", "improves dLLMs substantially",
          treat={"kind": "mdlm", "arm": "tuned"}, base={"kind": "mdlm", "arm": "weak"}, pair_by=("size", "U", "seed"),
          note="MDLM at the size's AR-tuned decay against the weak decay (0.1), where they differ"),
    Claim("strong decay closes most of the AR-MDLM gap", "closes most of the AR-dLLM gap",
          treat={"kind": "mdlm", "arm": "tuned"}, base={"kind": "mdlm", "arm": "half-weak"}, metric="gap",
          pair_by=("size", "U", "seed"), note="gap = MDLM - AR (wd) at the same size, U and seed; most: the tuned "
          "decay's gap against half the weak decay's")]


def records(rep):
    """The flat records of a report.json dict (module docstring)."""
    runs = [r for r in rep["runs"] if r.get("status") == "done"]
    n_wd = {r["size"]: r["N"] for r in runs if r["method"] == "wd"}
    out = [dict(kind="run", method=r["method"], size=r["size"], N=n_wd.get(r["size"], r["N"]), U=r["U"],
                seed=r["seed"], wd=r["wd"], loss=r["loss"]) for r in runs]
    for m in AR_METHODS:  # the fan-out: one gap per (size, seed) run at both the smallest and largest U
        rs = [r for r in out if r["method"] == m]
        if len({r["U"] for r in rs}) > 1:
            at = lambda u: {(r["size"], r["seed"]): r for r in rs if r["U"] == u}  # noqa: E731
            lo, hi = at(min(r["U"] for r in rs)), at(max(r["U"] for r in rs))
            out += [dict(kind="fan_gap", method=m, size=k[0], seed=k[1], N=lo[k]["N"],
                         gap=lo[k]["loss"] - hi[k]["loss"]) for k in sorted(lo) if k in hi]
    for method, fits in (rep.get("law_errors") or {}).items():
        for fit, cells in fits.items():
            out += [dict(kind="law_error", method=method, fit=fit, law=name, size=c["size"], U=c["U"], abs_err=c[name])
                    for c in cells for name in ("softq", "chinchilla") if name in c]
    for name, res in (rep.get("multipliers") or {}).items():
        for arm in ("wd+mir", "wd"):
            out += [dict(kind="multiplier", law=name, arm=a, size=c["size"], U=c["U"], log_m=math.log(m))
                    for c in (res.get(arm) or {}).get("cells", []) if 0 < c["multiplier"] < math.inf
                    for a, m in [(arm, c["multiplier"])] + [("paper", PAPER_MULTIPLIER)] * (arm == "wd+mir")]
    wd = {(r["size"], r["U"], r["seed"]): r for r in out if r.get("method") == "wd" and r["kind"] == "run"}
    tuned, weak, mdlm = {k[0]: r["wd"] for k, r in wd.items()}, {r["wd"] for r in out if r.get("method") == "mdlm-weak"}, {}
    for r in [r for r in out if r["kind"] == "run"]:  # one record per (arm, size, U, seed): two methods, one run
        arm = "weak" if r["method"] == "mdlm-weak" else "tuned" if r["wd"] == tuned.get(r["size"]) else None
        if r["method"].startswith("mdlm") and arm and tuned.get(r["size"]) not in weak:  # else no contrast
            ar = wd.get(k := (r["size"], r["U"], r["seed"]))
            mdlm[(arm,) + k] = dict(kind="mdlm", arm=arm, size=k[0], U=k[1], seed=k[2], loss=r["loss"],
                                    gap=r["loss"] - ar["loss"] if ar else None)
    return out + list(mdlm.values()) + [dict(r, arm="half-weak", gap=r["gap"] / 2) for r in mdlm.values()
                                        if r["arm"] == "weak" and r["gap"] is not None]
