"""The data-constrained experiment's scan: where on (sizes, U, epochs) the paper's fan-out can show itself
(Xu et al., arXiv 2606.06888, section 3: the gap between budgets grows with size only where the models
learn something at every budget and the larger ones overfit the smallest). choose_regime's rule:
    margin(run) = ln(unigram_val_ppl) - loss; overfit(run) = loss - train_loss
    (E, U0) qualifies when >= min_sizes sizes have margin >= `margin` (kept), the two largest kept overfit
    by >= `overfit_gap`, and MDLM at U0 has margin >= `mdlm_margin`; then the most sizes, the smallest U0,
    the fewest epochs. The grid is U0, 2 U0, ... <= max_budget; with a time limit (fits) a candidate keeps
    the most sizes, then the most budgets (>= min_budgets), that fit and whose two largest still overfit."""

import math


def margin(r):
    return None if r.get("loss") is None or not r.get("unigram_val_ppl") else math.log(r["unigram_val_ppl"]) - r["loss"]


def overfit(r):
    return None if r.get("loss") is None or r.get("train_loss") is None else r["loss"] - r["train_loss"]


def overfits(by, kept, rules):  # the two largest kept sizes
    return len(kept) >= 2 and all((overfit(by[s]) or -math.inf) >= rules["overfit_gap"] for s in kept[-2:])


def candidate(ar, mdlm, sizes, rules, n_budgets=None, fits=None):
    """One (epochs, U0) candidate: its kept sizes, the overfit of the largest two, the MDLM margin, whether it
    qualifies; n_budgets: how many budgets U0, 2 U0, ... it may have; fits(kept, n): within the time limit."""
    by = {r["size"]: r for r in ar}
    kept = [s for s in sizes if s in by and (margin(by[s]) or -math.inf) >= rules["margin"]]
    n, fitting, min_budgets = n_budgets, None, rules.get("min_budgets", 2)
    if fits is not None:  # the most sizes, then the most budgets, that fit and still overfit
        options = ((k, b) for k in range(len(kept), rules["min_sizes"] - 1, -1)
                   for b in range(n_budgets, min_budgets - 1, -1))
        fitting = next(((k, b) for k, b in options if overfits(by, kept[:k], rules) and fits(kept[:k], b)), None)
        if fitting:
            kept, n = kept[:fitting[0]], fitting[1]
    over, mm, why = {s: overfit(by[s]) for s in kept[-2:]}, margin(mdlm) if mdlm else None, []
    if len(kept) < rules["min_sizes"]:
        why.append(f"{len(kept)} sizes >= {rules['margin']:g} nats below the unigram level (< {rules['min_sizes']})")
    if not overfits(by, kept, rules):
        why.append(f"the largest kept sizes overfit by {', '.join('?' if v is None else f'{v:.2f}' for v in over.values())}"
                   f" (< {rules['overfit_gap']:g})")
    if n_budgets is not None and n_budgets < min_budgets:
        why.append(f"{n_budgets} budget(s) U0, 2 U0, ... within max_budget (< {min_budgets})")
    elif fits is not None and not why and fitting is None:
        why.append(f"no grid of >= {rules['min_sizes']} sizes and >= {min_budgets} budgets fits the time limit")
    if mdlm is not None and (mm is None or mm < rules["mdlm_margin"]):
        why.append(f"MDLM {mm if mm is not None else math.nan:.2f} nats below the unigram level (< {rules['mdlm_margin']:g})")
    return dict(kept=kept, n_budgets=n, overfit=over, mdlm_margin=mm, ok=not why, why="; ".join(why),
                margins={s: margin(by[s]) for s in sizes if s in by})


def choose_regime(records, sizes, rules, max_budget=None, fits=None):
    """The scan's choice from its runs (obj 'ar' | 'mdlm', size, U, epochs, loss, train_loss, unigram_val_ppl);
    sizes: the candidates, smallest first; fits(epochs, U0, sizes, budgets): the time limit (None: none).
    Returns dict(choice=(epochs, U0) or None, sizes=kept, budgets=the grid's, candidates=[...])."""
    ar = [r for r in records if r["obj"] == "ar"]
    cands = []
    for e in sorted({r["epochs"] for r in ar}):
        for u in sorted({r["U"] for r in ar if r["epochs"] == e}):
            mdlm = next((r for r in records if r["obj"] == "mdlm" and r["U"] == u), None)
            full = grid_budgets(u, max_budget) if max_budget else None
            fit = None if fits is None or not full else (lambda kept, n, e=e, u=u, f=full: fits(e, u, kept, f[:n]))
            cands.append(dict(epochs=e, U0=u, **candidate([r for r in ar if r["epochs"] == e and r["U"] == u],
                                                          mdlm, sizes, rules, len(full) if full else None, fit)))
    ok = [c for c in cands if c["ok"]]
    best = min(ok, key=lambda c: (-len(c["kept"]), -(c["n_budgets"] or 0), c["U0"], c["epochs"])) if ok else None
    budgets = (grid_budgets(best["U0"], max_budget)[:best["n_budgets"]] if best and max_budget else None)
    return dict(choice=(best["epochs"], best["U0"]) if best else None, sizes=best["kept"] if best else [],
                budgets=budgets, candidates=cands)


def closest(scan):
    """The candidate nearest to qualifying (most sizes kept, then most overfit): the fallback, the error's."""
    return max(scan["candidates"], key=lambda c: (len(c["kept"]), min([v for v in c["overfit"].values() if v is not None]
                                                                      or [-math.inf]))) if scan["candidates"] else None


def grid_budgets(u0, max_budget):
    """U0, 2 U0, 4 U0, ... <= max_budget (U0 alone where 2 U0 is beyond it: a candidate then has too few)."""
    out = [int(u0)]
    while out[-1] * 2 <= max_budget:
        out.append(out[-1] * 2)
    return out
