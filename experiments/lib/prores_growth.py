"""
How the residual stream's RMS grows with depth, as two numbers a run's report can test.
Chen et al., arXiv 2603.05369 (ProRes), report activation norms that grow linearly with depth
under ProRes and exponentially without it; the authors' code (dandingsky/ProRes) has no script
for that measurement, so the fit below is ours.

    fit = growth_fit(act_rms)      # act_rms: RMS after the embeddings, then after blocks 1..L
    fit["b"], fit["c"], fit["better"]

Over the layers l = 1..L (the embeddings, l = 0, have no log l), two lines through log RMS_l:

    exponential:  log RMS_l = a_exp + b l         (RMS multiplied by e^b at every layer)
    power:        log RMS_l = a_pow + c log l     (RMS ~ l^c)

c = 1 is growth linear in depth, c = 0 no growth; b > 0 with the exponential line the better fit
is exponential growth. Both lines have two parameters, so the one with the smaller residual sum
of squares (rss_exp, rss_pow) is the better fit (`better`).
"""

import math

import numpy as np

MIN_LAYERS = 3  # a line through two points fits exactly: no residuals to tell the two apart


def line_fit(x, y):
    """Least squares y = a + s x: (a, s, residual sum of squares)."""
    s, a = np.polyfit(x, y, 1)
    return float(a), float(s), float(np.sum((y - (a + s * x)) ** 2))


def growth_fit(act_rms):
    """The two fits of the module docstring for one model's act_rms (L + 1 floats); None with
    fewer than MIN_LAYERS blocks or a value that has no log (zero, negative, NaN)."""
    if not act_rms or len(act_rms) - 1 < MIN_LAYERS:
        return None
    rms = act_rms[1:]
    if not all(v is not None and math.isfinite(v) and v > 0 for v in rms):
        return None
    layer, y = np.arange(1, len(rms) + 1, dtype=float), np.log(np.asarray(rms, dtype=float))
    a_exp, b, rss_exp = line_fit(layer, y)
    a_pow, c, rss_pow = line_fit(np.log(layer), y)
    return {"b": b, "a_exp": a_exp, "rss_exp": rss_exp, "c": c, "a_pow": a_pow, "rss_pow": rss_pow,
            "better": "exponential" if rss_exp < rss_pow else "power"}


def growth_curve(curve):
    """b and c of growth_fit at each evaluation of a run ({"b": [...], "c": [...]}, None where
    an evaluation has no fit)."""
    fits = [growth_fit(x) for x in curve]
    return {k: [f[k] if f else None for f in fits] for k in ("b", "c")}
