"""
The data-constrained experiment's scan: where on (sizes, U, epochs) the paper's law can show itself.
Xu et al., arXiv 2606.06888, section 3: the loss gap between data budgets grows with model size
(fan-out) only where the models have learned something at every budget and the larger ones
overfit the smallest; a grid at the unigram level (the earlier default's smallest models at
U = 8k) has no fan-out to show.

The scan trains AR runs (weak decay, seed 0, the authors' dropout and untied head) at every
candidate size x candidate smallest budget U0 x candidate epochs, and one MDLM run (the smallest
size, every U0, the MDLM epochs). `choose_regime` then reads them by one rule:

    margin(run)  = ln(unigram_val_ppl) - loss          (nats below the unigram level)
    overfit(run) = loss - train_loss                     (validation above training)
    (E, U0) qualifies when >= min_sizes sizes have margin >= `margin` (they are kept), the two
    largest kept sizes have overfit >= `overfit_gap`, and the MDLM run at U0 has margin >= `mdlm_margin`.
    Among those that qualify: the most sizes, then the smallest U0 (the widest span of U), then the
    fewest epochs (the cheapest).

The grid's budgets are then U0, 2 U0, 4 U0, ... up to max_budget (grid_budgets). A larger U only
lowers the loss of a model that clears the margin at U0; the report checks every grid run anyway.
"""

import math


def margin(r):
    """Nats below the unigram level: ln(unigram_val_ppl) - loss (None without both)."""
    if r.get("loss") is None or not r.get("unigram_val_ppl"):
        return None
    return math.log(r["unigram_val_ppl"]) - r["loss"]


def overfit(r):
    """loss - train_loss: how far the validation loss sits above the training loss (None without both)."""
    if r.get("loss") is None or r.get("train_loss") is None:
        return None
    return r["loss"] - r["train_loss"]


def candidate(ar, mdlm, sizes, rules):
    """One (epochs, U0) candidate's reading: its kept sizes, the overfit of the largest two, the
    MDLM margin, and whether it qualifies (the module docstring's rule)."""
    by = {r["size"]: r for r in ar}
    kept = [s for s in sizes if s in by and (margin(by[s]) or -math.inf) >= rules["margin"]]
    top = kept[-2:]
    over = {s: overfit(by[s]) for s in top}
    mm = margin(mdlm) if mdlm else None
    why = []
    if len(kept) < rules["min_sizes"]:
        why.append(f"{len(kept)} sizes >= {rules['margin']:g} nats below the unigram level (< {rules['min_sizes']})")
    if len(top) < 2 or any(v is None or v < rules["overfit_gap"] for v in over.values()):
        why.append(f"the largest kept sizes overfit by {', '.join(f'{v:.2f}' if v is not None else '?' for v in over.values())}"
                   f" (< {rules['overfit_gap']:g})")
    if mdlm is not None and (mm is None or mm < rules["mdlm_margin"]):
        why.append(f"MDLM {mm if mm is not None else float('nan'):.2f} nats below the unigram level (< {rules['mdlm_margin']:g})")
    return dict(kept=kept, overfit=over, mdlm_margin=mm, ok=not why, why="; ".join(why),
                margins={s: margin(by[s]) for s in sizes if s in by})


def choose_regime(records, sizes, rules):
    """The scan's choice. records: finished scan runs, dicts with obj ('ar' | 'mdlm'), size, U,
    epochs, loss, train_loss, unigram_val_ppl; sizes: the candidate size labels, smallest first;
    rules: margin, overfit_gap, mdlm_margin, min_sizes. Returns dict(choice=(epochs, U0) or None,
    sizes=the kept sizes, candidates=[dict(epochs, U0, **candidate(...))] in scan order)."""
    ar = [r for r in records if r["obj"] == "ar"]
    cands = []
    for e in sorted({r["epochs"] for r in ar}):
        for u in sorted({r["U"] for r in ar if r["epochs"] == e}):
            mdlm = next((r for r in records if r["obj"] == "mdlm" and r["U"] == u), None)
            cands.append(dict(epochs=e, U0=u, **candidate([r for r in ar if r["epochs"] == e and r["U"] == u],
                                                          mdlm, sizes, rules)))
    ok = [c for c in cands if c["ok"]]
    best = min(ok, key=lambda c: (-len(c["kept"]), c["U0"], c["epochs"])) if ok else None
    return dict(choice=(best["epochs"], best["U0"]) if best else None, sizes=best["kept"] if best else [],
                candidates=cands)


def closest(scan):
    """The candidate nearest to qualifying (most sizes kept, then most overfit): a --scan-fallback
    choice, and what a one-line error names."""
    def score(c):
        return (len(c["kept"]), min([v for v in c["overfit"].values() if v is not None] or [-math.inf]))
    return max(scan["candidates"], key=score) if scan["candidates"] else None


def grid_budgets(u0, max_budget):
    """U0, 2 U0, 4 U0, ... <= max_budget (at least U0 and 2 U0)."""
    out = [int(u0)]
    while out[-1] * 2 <= max_budget or len(out) < 2:
        out.append(out[-1] * 2)
    return out
