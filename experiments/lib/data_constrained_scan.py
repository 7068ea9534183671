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

With a time limit (`fits(sizes, n_budgets)`: does that grid train within the experiment's
--grid-hours), a candidate keeps the most sizes, then the most budgets (>= min_budgets: the laws
are fitted without the largest U and scored on it), whose grid fits and whose two largest sizes
still overfit; the largest sizes and budgets go first, since they cost the most per run.
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


def overfits(by, kept, rules):
    """The two largest kept sizes both overfit by >= overfit_gap."""
    return len(kept) >= 2 and all((overfit(by[s]) if overfit(by[s]) is not None else -math.inf) >= rules["overfit_gap"]
                                  for s in kept[-2:])


def candidate(ar, mdlm, sizes, rules, n_budgets=None, fits=None):
    """One (epochs, U0) candidate's reading: its kept sizes, the overfit of the largest two, the
    MDLM margin, and whether it qualifies (the module docstring's rule). n_budgets: how many
    budgets U0, 2 U0, ... the grid may have; fits(kept, n) -> bool: within the time limit."""
    by = {r["size"]: r for r in ar}
    kept = [s for s in sizes if s in by and (margin(by[s]) or -math.inf) >= rules["margin"]]
    n, fitting = n_budgets, None
    if fits is not None:  # the most sizes, then the most budgets, that fit and still overfit
        options = ((k, b) for k in range(len(kept), rules["min_sizes"] - 1, -1)
                   for b in range(n_budgets, rules.get("min_budgets", 2) - 1, -1))
        fitting = next(((k, b) for k, b in options if overfits(by, kept[:k], rules) and fits(kept[:k], b)), None)
        if fitting:
            kept, n = kept[:fitting[0]], fitting[1]
    top = kept[-2:]
    over = {s: overfit(by[s]) for s in top}
    mm = margin(mdlm) if mdlm else None
    why = []
    if len(kept) < rules["min_sizes"]:
        why.append(f"{len(kept)} sizes >= {rules['margin']:g} nats below the unigram level (< {rules['min_sizes']})")
    if not overfits(by, kept, rules):
        why.append(f"the largest kept sizes overfit by {', '.join(f'{v:.2f}' if v is not None else '?' for v in over.values())}"
                   f" (< {rules['overfit_gap']:g})")
    if fits is not None and not why and fitting is None:
        why.append(f"no grid of >= {rules['min_sizes']} sizes and >= {rules.get('min_budgets', 2)} budgets fits the "
                   "time limit")
    if mdlm is not None and (mm is None or mm < rules["mdlm_margin"]):
        why.append(f"MDLM {mm if mm is not None else float('nan'):.2f} nats below the unigram level (< {rules['mdlm_margin']:g})")
    return dict(kept=kept, n_budgets=n, overfit=over, mdlm_margin=mm, ok=not why, why="; ".join(why),
                margins={s: margin(by[s]) for s in sizes if s in by})


def choose_regime(records, sizes, rules, max_budget=None, fits=None):
    """The scan's choice. records: finished scan runs, dicts with obj ('ar' | 'mdlm'), size, U,
    epochs, loss, train_loss, unigram_val_ppl; sizes: the candidate size labels, smallest first;
    rules: margin, overfit_gap, mdlm_margin, min_sizes (, min_budgets); max_budget: the grid's
    largest U; fits(epochs, U0, sizes, budgets) -> bool: the time limit (None: none). Returns
    dict(choice=(epochs, U0) or None, sizes=the kept sizes, budgets=the grid's budgets (with
    max_budget), candidates=[dict(epochs, U0, **candidate(...))] in scan order)."""
    ar = [r for r in records if r["obj"] == "ar"]
    cands = []
    for e in sorted({r["epochs"] for r in ar}):
        for u in sorted({r["U"] for r in ar if r["epochs"] == e}):
            mdlm = next((r for r in records if r["obj"] == "mdlm" and r["U"] == u), None)
            full = grid_budgets(u, max_budget) if max_budget else None
            fit = None if fits is None or not full else \
                (lambda kept, n, e=e, u=u, full=full: fits(e, u, kept, full[:n]))
            cands.append(dict(epochs=e, U0=u, **candidate([r for r in ar if r["epochs"] == e and r["U"] == u],
                                                          mdlm, sizes, rules, len(full) if full else None, fit)))
    ok = [c for c in cands if c["ok"]]
    best = min(ok, key=lambda c: (-len(c["kept"]), -(c["n_budgets"] or 0), c["U0"], c["epochs"])) if ok else None
    budgets = (grid_budgets(best["U0"], max_budget)[:best["n_budgets"]] if best and max_budget else None)
    return dict(choice=(best["epochs"], best["U0"]) if best else None, sizes=best["kept"] if best else [],
                budgets=budgets, candidates=cands)


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
