"""
The claims of Xu et al., "Data-Constrained Language Model Pretraining: Improved Regularization and Scaling
Laws", arXiv 2606.06888 (its abstract and results on MIR, the SoftQ law and dLLMs), read by claims.py. MIR as
the authors' dcp/train4_diffusionauxiliary_impl.py: a mask ratio per sequence (:439-443), masked positions after
a kept prefix (:445-454), the masked copy predicting the original targets (:513-527).
records(report) flattens a report.json dict: one record per finished grid run (kind "run"; N is the size's
baseline N: an untied head's [MASK] row makes MIR's own N d larger), and the derived ones: a law's absolute
error per cell (`law_errors`), the log multiplier per cell (`multipliers`), the fan-out gap L(smallest U) -
L(largest U) per (size, seed), MDLM's two decays per cell where they differ with the gap to AR (AR_OF).
"""

import math

from experiments.lib.claims import Claim

AR_METHODS = ("wd", "wd+mir", "ar-weak")  # the law and fan-out claims are the paper's for AR models
AR_OF = {"mdlm-weak": "ar-weak", "mdlm-strong": "wd", "mdlm-tuned": "wd"}  # an MDLM arm's AR model
MIR, WD = {"kind": "run", "method": "wd+mir"}, {"kind": "run", "method": "wd"}
MDLM = {"kind": "mdlm"}
GAIN = "0.006 nats lower at 72M up to 0.03 at 1.4B parameters"
law = lambda fit, name: {"kind": "law_error", "fit": fit, "law": name}  # noqa: E731

CLAIMS = [
    Claim("MIR lowers the validation loss at every size", GAIN, treat=MIR, base=WD, cells="size",
          pair_by=("U", "seed"), fmt="{:.4f}"),
    Claim("MIR's gain grows with model size", "~0.019 nats per decade of N (0.006 at 72M, 0.03 at 1.4B)",
          treat=MIR, base=WD, slope="N", log_x=True, pair_by=("size", "U", "seed")),
    Claim("MIR lowers the validation loss over the whole grid", GAIN, treat=MIR, base=WD,
          pair_by=("size", "U", "seed"), fmt="{:.4f}"),
    Claim("MIR lowers the validation loss at every data budget", f"at every size ({GAIN}); not stated by U",
          treat=MIR, base=WD, cells="U", label="U = {:,}", pair_by=("size", "seed"), fmt="{:.4f}"),
    Claim("MIR is worth more unique data (effective-data multiplier)", "~1.3x under the baseline's SoftQ fit",
          treat={"kind": "multiplier", "law": "softq", "arm": "wd+mir"},
          base={"kind": "multiplier", "law": "softq", "arm": "wd"}, metric="log_m", lower_is_better=False,
          pair_by=("size", "U"), note="log multiplier by cell, MIR's against the baseline's own cells"),
    Claim("SoftQ fits better than Chinchilla", "SoftQ fits best", treat=law("in_sample", "softq"),
          base=law("in_sample", "chinchilla"), metric="abs_err", cells="method", only=AR_METHODS,
          pair_by=("size", "U"), fmt="{:.4f}", note="absolute error per seed-averaged cell"),
    Claim("SoftQ extrapolates better than Chinchilla (largest U held out)", "SoftQ extrapolates best",
          treat=law("extrapolation", "softq"), base=law("extrapolation", "chinchilla"), metric="abs_err",
          cells="method", only=AR_METHODS, pair_by=("size", "U"), fmt="{:.4f}",
          note="absolute error per held-out cell"),
    Claim("the loss gap between data budgets grows with model size (fan-out)",
          "the gap grows with N (why Chinchilla is mis-specified)", treat={"kind": "fan_gap"}, cells="method",
          only=AR_METHODS, metric="gap", slope="N", log_x=True, note="L(smallest U) - L(largest U) per (size, seed)"),
    Claim("strong decay tuned for AR improves the masked-diffusion model", "improves dLLMs substantially",
          treat=dict(MDLM, decay="stronger"), base=dict(MDLM, decay="weaker"), pair_by=("size", "U"),
          note="MDLM (seed 0) at the stronger of its two decays against the weaker, where they differ"),
    Claim("strong decay closes most of the AR-MDLM gap", "closes most of the AR-dLLM gap",
          treat=dict(MDLM, decay="stronger"), base=dict(MDLM, decay="weaker"), metric="gap",
          pair_by=("size", "U"), note="gap = MDLM - AR at the same decay (authors' preset: AR at its tuned one)"),
]


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
            out += [dict(kind="multiplier", law=name, arm=arm, size=c["size"], U=c["U"], log_m=math.log(c["multiplier"]))
                    for c in (res.get(arm) or {}).get("cells", []) if 0 < c["multiplier"] < math.inf]
    seed0 = {(r["method"], r["size"], r["U"]): r for r in out if r["kind"] == "run" and r["seed"] == 0}
    for (m, size, U), r in sorted(seed0.items()):
        other = [seed0[k] for k in seed0 if k[0] in AR_OF and k[0] != m and k[1:] == (size, U)]
        if m in AR_OF and other and other[0]["wd"] != r["wd"]:
            ar = seed0.get((AR_OF[m], size, U))
            out.append(dict(kind="mdlm", method=m, size=size, U=U, wd=r["wd"], loss=r["loss"],
                            decay="stronger" if r["wd"] > other[0]["wd"] else "weaker",
                            gap=r["loss"] - ar["loss"] if ar else None))
    return out
