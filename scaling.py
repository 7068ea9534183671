"""Scaling laws for data-constrained pre-training: Chinchilla, Muennighoff, Quanta, SoftQ, and their fitter.

Xu et al., arXiv 2606.06888 (the SoftQ law L(N, U), its comparison laws, fan-out, effective-data
multiplier); Muennighoff et al., arXiv 2305.16264 (the D', N' law); Hoffmann et al., arXiv 2203.15556
(the additive law and its fitting "approach 3"). The data-constrained authors' code
(github.com/yixinw-lab/dc_pretrain) trains the grid (scripts/launch_*scalinglaw*.sh) but holds no
fitter: ours follows the Chinchilla replications' approach 3 (below).

    N = parameters, U = unique tokens, D = tokens seen (D >= U; only Muennighoff uses D), L = loss.

    chinchilla   L = E + A / N^alpha + B / U^beta
    muennighoff  L = E + A / N'^alpha + B / D'^beta, repetition saturating (arXiv 2305.16264):
                   D' = U + U R_D* (1 - exp(-R_D / R_D*)),      R_D = max(D / U - 1, 0)
                   N' = U_N + U_N R_N* (1 - exp(-R_N / R_N*)),  R_N = max(N / U_N - 1, 0)
                   U_N = min(N, (U G)^(beta / alpha) G),        G = (alpha A / (beta B))^(1 / (alpha + beta))
                 (U_N: the compute-optimal size for U tokens; its authors' R_D* ~ 15.4, R_N* ~ 5.3)
    quanta       L = E + max(A / N^alpha, B / U^(alpha / (1 + alpha)))
    softq        L = E + (A / N^rho + B / U^(rho / (1 + alpha)))^(alpha / rho)   (the paper's law)

Quanta is the paper's *coupled* law, a hard bottleneck: L = E + max(A N^-alpha, B U^-(alpha/(1+alpha))).
SoftQ smooths it: E + (A N^-rho + B U^-(rho/(1+alpha)))^(alpha/rho) tends to Quanta as rho -> inf with
SoftQ's A, B = Quanta's A, B to the power rho/alpha (see `quanta`). `quanta_additive` (the two terms
added, = SoftQ at rho = alpha) is kept only as a control: it cannot fan out.

Fitting (approach 3, as the Chinchilla replications do it): the prediction is written in log-space
as a log-sum-exp of the terms; the objective is the sum of Huber losses (delta 1e-3) between
log L_pred and log L; L-BFGS (float64) from a grid of initial points; the best fit is kept.
Choices a reader should know (ours, not the papers'):
- Parametrisation, not clipping, keeps the parameters legal: E, A, B = exp(e, a, b); the exponents
  alpha, beta = 2 * sigmoid(.) lie in (0, 2); R_D*, R_N* = exp(.).
- SoftQ is fitted in the coordinates (e, a', b', alpha, tau) with tau = alpha / rho and
  a' = log A^(alpha/rho), b' = log B^(alpha/rho) (the amplitudes of its two limits), because then
      log(L - E) = tau * logsumexp((a' - alpha log N) / tau, (b' - alpha/(1+alpha) log U) / tau),
  a smooth maximum of the two bottlenecks at temperature tau: tau -> 0 (rho -> inf) is the hard
  max, the Quanta law; tau = 1 (rho = alpha) is the additive sum, quanta_additive. tau is kept in
  (0.02, 5) by a sigmoid in log tau. The result is reported in the paper's (E, A, B, alpha, rho).
- Quanta's max has a kink where the two bottlenecks are equal, so it is smoothed for the optimiser
  only, in the same form: the max is replaced by T * logsumexp(./T) (an upper bound, at most
  T log 2 above it, in log(L - E)), i.e. SoftQ at tau = T. The grid is screened and the starts are
  run at T = 0.1; the winner is then polished by one L-BFGS pass at each of T = 0.03, 0.01,
  0.003, 0.001 and finally 0 (the exact max), each pass starting where the last ended. The fit
  kept is the pass with the lowest exact (T = 0) objective; the reported parameters, objective,
  RMSE and MAE all use the exact max. Each polishing pass minimises the objective divided by its
  value at the pass's start (same minimiser): torch's L-BFGS drops curvature pairs with
  y.s < 1e-10, which near a noise-free optimum (objective ~1e-10) left it at steepest descent.
  Quanta's parameters are identifiable only if both bottlenecks bind on some runs: where one term
  always wins, the other's amplitude changes no prediction (the tests' grid has both).
- The grid is screened cheaply (one vectorised evaluation of every grid point), L-BFGS runs from the
  best few points as one batched problem (their objectives are independent, so the sum is
  minimised by minimising each), and the winner is polished alone.
- Muennighoff is fitted in two steps like its authors: E, A, B, alpha, beta as Chinchilla in N and
  D on the single-epoch rows (D == U; all rows if there are none), then R_D*, R_N* with the base
  frozen. Step 1 takes single-epoch runs as unsaturated (N' = N), as in the authors' data; single-
  epoch runs of models far above U_N would bias the base. A saturation constant that no run constrains (no D > U, or no N > U_N) is reported as
  the authors' published value (R_D* = 15.4, R_N* = 5.3): it changes no prediction on these runs.
- Extrapolation holds out the largest unique-data budget U. Fan-out is the least-squares slope of
  the loss gap L(smallest U) - L(largest U) against log10 N (loss per decade of N; an additive
  law gives exactly 0). The effective-data multiplier keeps D (compute) fixed and solves for U.

Command line (a bad input or a bad command line ends in one line on stderr and exit status 2):
    python scaling.py fit runs.csv [--law softq] [--json]  # laws: chinchilla muennighoff quanta quanta_additive softq
    python scaling.py compare runs.csv [--png laws.png]
"""

import argparse
import contextlib
import csv
import json
import math
import os
import sys
from dataclasses import dataclass

import numpy as np
import torch
import torch.nn.functional as F

from data.common import ArgumentParser, UserError, check_output

# -----------------------------------------------------------------------------
# The laws, as the module docstring writes them (numpy, natural parameters)


def chinchilla(N, U, E, A, B, alpha, beta):
    """Additive law: L = E + A / N^alpha + B / U^beta."""
    return E + A / N**alpha + B / U**beta


def muennighoff_G(A, B, alpha, beta):
    """G = (alpha * A / (beta * B))^(1 / (alpha + beta))."""
    return (alpha * A / (beta * B)) ** (1 / (alpha + beta))


def muennighoff_U_N(N, U, A, B, alpha, beta):
    """U_N = min(N, (U * G)^(beta / alpha) * G): the compute-optimal model size for U tokens."""
    G = muennighoff_G(A, B, alpha, beta)
    return np.minimum(N, (U * G) ** (beta / alpha) * G)


def effective_data(D, U, rd_star):
    """D' = U + U * R_D* * (1 - exp(-R_D / R_D*)),  R_D = max(D / U - 1, 0)."""
    R_D = np.maximum(D / U - 1, 0)
    return U + U * rd_star * (-np.expm1(-R_D / rd_star))


def effective_params(N, U, A, B, alpha, beta, rn_star):
    """N' = U_N + U_N * R_N* * (1 - exp(-R_N / R_N*)),  R_N = max(N / U_N - 1, 0)."""
    U_N = muennighoff_U_N(N, U, A, B, alpha, beta)
    R_N = np.maximum(N / U_N - 1, 0)
    return U_N + U_N * rn_star * (-np.expm1(-R_N / rn_star))


def muennighoff(N, D, U, E, A, B, alpha, beta, rd_star, rn_star):
    """Data-constrained law: L = E + A / N'^alpha + B / D'^beta (N', D' above)."""
    N_ = effective_params(N, U, A, B, alpha, beta, rn_star)
    D_ = effective_data(D, U, rd_star)
    return E + A / N_**alpha + B / D_**beta


def quanta(N, U, E, A, B, alpha):
    """Quanta, the coupled law: L = E + max(A / N^alpha, B / U^(alpha / (1 + alpha))).

    The loss is set by the tighter of two bottlenecks: the quanta N parameters can hold and the
    quanta U tokens can teach. It is SoftQ's hard limit: write k = rho / alpha and
    a = A_q N^-alpha, b = B_q U^(-alpha/(1+alpha)); with SoftQ's A = A_q^k, B = B_q^k,
        SoftQ = E + (A N^-rho + B U^(-rho/(1+alpha)))^(alpha/rho) = E + (a^k + b^k)^(1/k),
    and max(a, b) <= (a^k + b^k)^(1/k) <= 2^(1/k) max(a, b), so SoftQ -> Quanta as rho -> inf at
    fixed alpha (relative gap in L - E at most 2^(alpha/rho) - 1). Unlike the additive laws it fans
    out: the gap between two budgets U is 0 while both are parameter-bound and opens as N grows.
    """
    return E + np.maximum(A / N**alpha, B / U ** (alpha / (1 + alpha)))


def quanta_additive(N, U, E, A, B, alpha):
    """The additive reading of Quanta: L = E + A / N^alpha + B / U^(alpha / (1 + alpha)).

    Not the paper's coupled law (an additive law cannot fan out, like Chinchilla). Kept as a
    control for `compare`: it has Quanta's parameters and coupled exponent and differs only in
    adding the two bottlenecks instead of taking the tighter one, so Quanta vs quanta_additive
    isolates the bottleneck from the exponent coupling. It is also SoftQ at rho = alpha exactly.
    """
    return E + A / N**alpha + B / U ** (alpha / (1 + alpha))


def softq(N, U, E, A, B, alpha, rho):
    """SoftQ: L = E + (A / N^rho + B / U^(rho / (1 + alpha)))^(alpha / rho)."""
    return E + (A / N**rho + B / U ** (rho / (1 + alpha))) ** (alpha / rho)


PARAMS = {  # keys of each law's parameters, as in the signatures above
    "chinchilla": ("E", "A", "B", "alpha", "beta"),
    "muennighoff": ("E", "A", "B", "alpha", "beta", "rd_star", "rn_star"),
    "quanta": ("E", "A", "B", "alpha"),
    "quanta_additive": ("E", "A", "B", "alpha"),
    "softq": ("E", "A", "B", "alpha", "rho"),
}
LAWS = tuple(PARAMS)
DESCRIPTION = {  # one line per law, for the command line's help
    "chinchilla": "additive, E + A/N^alpha + B/U^beta",
    "muennighoff": "data-constrained, Chinchilla in effective N', D' (uses D)",
    "quanta": "coupled hard bottleneck, E + max(A/N^alpha, B/U^(alpha/(1+alpha)))",
    "quanta_additive": "Quanta's terms added (no fan-out; a control)",
    "softq": "the paper's soft bottleneck, E + (A/N^rho + B/U^(rho/(1+alpha)))^(alpha/rho)",
}


def predict(law, params, N, U, D=None):
    """The law's loss at (N, U[, D]) for a dict of its parameters."""
    N, U = np.asarray(N, float), np.asarray(U, float)
    if law == "muennighoff":
        D = U if D is None else np.asarray(D, float)
        return muennighoff(N, D, U, **params)
    return globals()[law](N, U, **params)


# -----------------------------------------------------------------------------
# The same laws in log-space (torch), for fitting. e, a, b are log E, log A, log B.


def _lse(*terms):
    x = torch.stack(torch.broadcast_tensors(*terms))
    m = x.detach().amax(dim=0)  # the usual shift; detached, as the result does not depend on it
    return m + torch.log(torch.exp(x - m).sum(dim=0))


def log_chinchilla(logN, logU, e, a, b, alpha, beta):
    """log L = LSE(e, a - alpha log N, b - beta log U)."""
    return _lse(e, a - alpha * logN, b - beta * logU)


def log_quanta(logN, logU, e, a, b, alpha, temperature=0.0):
    """log L = LSE(e, max(a - alpha log N, b - alpha / (1 + alpha) log U)).

    temperature T > 0 replaces the max by its smooth upper bound T * LSE(x / T, y / T), which
    exceeds the max by at most T log 2; this is exactly SoftQ with tau = alpha / rho = T in its
    fit coordinates (see the module docstring). The fitter anneals T to 0; 0 is the law itself.
    """
    param, data = a - alpha * logN, b - alpha / (1 + alpha) * logU
    if temperature == 0:
        return _lse(e, torch.maximum(param, data))
    return _lse(e, temperature * _lse(param / temperature, data / temperature))


def log_quanta_additive(logN, logU, e, a, b, alpha):
    """log L = LSE(e, a - alpha log N, b - alpha / (1 + alpha) log U)."""
    return _lse(e, a - alpha * logN, b - alpha / (1 + alpha) * logU)


def log_softq(logN, logU, e, a, b, alpha, rho):
    """log L = LSE(e, alpha / rho * LSE(a - rho log N, b - rho / (1 + alpha) log U))."""
    return _lse(e, alpha / rho * _lse(a - rho * logN, b - rho / (1 + alpha) * logU))


def log_muennighoff(logN, logD, logU, e, a, b, alpha, beta, rd_star, rn_star):
    """log L = LSE(e, a - alpha log N', b - beta log D'), N' and D' formed in log-space."""
    R_D = torch.clamp(torch.exp(logD - logU) - 1, min=0)
    logD_ = logU + torch.log1p(-rd_star * torch.expm1(-R_D / rd_star))
    logG = (torch.log(alpha) + a - torch.log(beta) - b) / (alpha + beta)
    logU_N = torch.minimum(logN, beta / alpha * (logU + logG) + logG)
    R_N = torch.clamp(torch.exp(logN - logU_N) - 1, min=0)
    logN_ = logU_N + torch.log1p(-rn_star * torch.expm1(-R_N / rn_star))
    return _lse(e, a - alpha * logN_, b - beta * logD_)


# -----------------------------------------------------------------------------
# Fit coordinates: L-BFGS moves unconstrained numbers; a squash maps them to legal parameters

EXPONENT_MAX = 2.0  # alpha, beta in (0, EXPONENT_MAX)
TAU_RANGE = (0.02, 5.0)  # SoftQ's tau = alpha / rho
HUBER_DELTA = 1e-3
PUBLISHED_RD_STAR, PUBLISHED_RN_STAR = 15.4, 5.3  # Muennighoff et al.'s fit


def _squash(lo, hi):
    """(unconstrained -> (lo, hi), its inverse on floats)."""
    return (lambda x: lo + (hi - lo) * torch.sigmoid(x), lambda v: math.log((v - lo) / (hi - v)))


_FREE = (lambda x: x, lambda v: v)  # e, a, b are already logs
_EXPONENT = _squash(0.0, EXPONENT_MAX)
_LOG_TAU = _squash(*map(math.log, TAU_RANGE))
_TAU = (lambda x: torch.exp(_LOG_TAU[0](x)), lambda v: _LOG_TAU[1](math.log(v)))  # a sigmoid in log tau
_POSITIVE = (torch.exp, math.log)

# Per law: (name, squash, initial values in natural units); the grid is their product.
_E = [-1.0, -0.5, 0.0, 0.5, 1.0, 1.5]
_AMP = [0.0, 2.5, 5.0, 7.5, 10.0, 15.0, 20.0, 25.0]  # log A, log B (Besiroglu et al. use 0..25)
_EFF = [0.0, 2.0, 4.0, 6.0, 8.0, 11.0]  # SoftQ's log effective amplitudes a', b'
_EXP = [0.1, 0.25, 0.4, 0.6, 0.9, 1.3]
_R = [0.3, 1.0, 3.0, 10.0, 30.0, 100.0]  # R_D*, R_N*
COORDS = {
    "chinchilla": [("e", _FREE, _E), ("a", _FREE, _AMP), ("b", _FREE, _AMP),
                   ("alpha", _EXPONENT, _EXP), ("beta", _EXPONENT, _EXP)],
    "quanta": [("e", _FREE, _E), ("a", _FREE, _AMP), ("b", _FREE, _AMP), ("alpha", _EXPONENT, _EXP)],
    "quanta_additive": [("e", _FREE, _E), ("a", _FREE, _AMP), ("b", _FREE, _AMP), ("alpha", _EXPONENT, _EXP)],
    "softq": [("e", _FREE, _E), ("a_eff", _FREE, _EFF), ("b_eff", _FREE, _EFF),
              ("alpha", _EXPONENT, _EXP), ("tau", _TAU, [0.1, 0.3, 1.0])],
    "muennighoff": [("rd_star", _POSITIVE, _R), ("rn_star", _POSITIVE, _R)],  # step 2 only
}


def _grid(law):
    axes = [torch.tensor([inv(v) for v in vals], dtype=torch.float64) for _, (_, inv), vals in COORDS[law]]
    return torch.cartesian_prod(*axes).reshape(-1, len(axes))


def _coords(law, th, base=None):
    """Unconstrained (K, P) -> dict of the log-space law's parameters, each (K, 1)."""
    p = {name: squash(th[:, i : i + 1]) for i, (name, (squash, _), _) in enumerate(COORDS[law])}
    if law == "softq":  # back from (a', b', tau) to the paper's (a, b, rho)
        tau = p.pop("tau")
        p.update(a=p.pop("a_eff") / tau, b=p.pop("b_eff") / tau, rho=p["alpha"] / tau)
    if law == "muennighoff":  # step 2: the base (log-space E, A, B, alpha, beta) is frozen
        p.update(base)
    return p


def _log_predict(law, p, logN, logU, logD, temperature=0.0):
    if law == "muennighoff":
        return log_muennighoff(logN, logD, logU, **p)
    if law == "quanta":
        return log_quanta(logN, logU, **p, temperature=temperature)
    return {"chinchilla": log_chinchilla, "quanta_additive": log_quanta_additive, "softq": log_softq}[law](
        logN, logU, **p)


def _natural(p):
    """Log-space parameters (one start) -> the law's parameters as floats."""
    out = {}
    for k, v in p.items():
        v = float(v.reshape(-1)[0]) if torch.is_tensor(v) else float(v)
        out[{"e": "E", "a": "A", "b": "B"}.get(k, k)] = float(np.exp(v)) if k in ("e", "a", "b") else v
    return out


# -----------------------------------------------------------------------------
# The fitter


@dataclass
class Fit:
    law: str
    params: dict  # keys as in the law's signature
    rmse: float  # in-sample, loss units
    mae: float
    objective: float  # sum of Huber losses at the optimum (Quanta: with the exact hard max)

    def predict(self, N, U, D=None):
        return predict(self.law, self.params, N, U, D)


@contextlib.contextmanager
def _one_thread():
    """The fitter's tensors are tiny: a thread pool costs more than it gives (20x, busy 2-core box)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(n)


def _lbfgs(objective, theta, iters):
    """L-BFGS on objective((K, P)) -> (K,) summed over K from theta; returns (theta, values (K,))."""
    theta = theta.clone().requires_grad_(True)
    opt = torch.optim.LBFGS([theta], lr=1, max_iter=iters, history_size=50, tolerance_grad=1e-12,
                            tolerance_change=1e-15, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        v = objective(theta).sum()
        v.backward()
        return v

    opt.step(closure)
    with torch.no_grad():
        return theta.detach(), torch.nan_to_num(objective(theta), nan=math.inf)


def _minimise(objective, grid, top=8, max_iter=(100, 500)):
    """Minimise objective((K, P)) -> (K,) from the best `top` grid points; returns (theta, value)."""
    with torch.no_grad():  # screen the whole grid in chunks
        vals = torch.cat([objective(g) for g in torch.split(grid, 4096)])
    vals = torch.nan_to_num(vals, nan=math.inf)
    starts = grid[torch.argsort(vals)[:top]]
    # All starts as one problem: the objectives are independent, so minimising their sum minimises
    # each. It converges more slowly than a lone start, so a short run ranks them and the winner
    # is polished alone (this reached the best of 40 long single-start runs in our tests).
    theta, vals = _lbfgs(objective, starts, max_iter[0])
    best, val = _lbfgs(objective, theta[torch.argmin(vals)][None], max_iter[1])
    return best, float(val[0])


# Quanta's max is smoothed only for the optimiser: T * LSE(x/T, y/T) at these temperatures, one
# L-BFGS pass each, each starting where the previous one ended; the last, 0, is the hard max.
QUANTA_TEMPERATURES = (0.1, 0.03, 0.01, 0.003, 0.001, 0.0)


def _minimise_annealed(make_objective, grid, top=8, temperatures=QUANTA_TEMPERATURES, iters=500):
    """_minimise at temperatures[0], then one L-BFGS pass per lower temperature from the last end point.

    Returns the end point with the lowest objective at temperatures[-1] (the exact law), and that
    value: the exact objective judges every pass, so a pass that stalls on a kink cannot win.
    Each pass minimises its objective divided by its value at the pass's start (the same
    minimiser): torch's L-BFGS drops curvature pairs with y.s < 1e-10, and near a noise-free
    optimum (objective ~1e-10) that left the last passes at steepest descent.
    """
    exact = make_objective(temperatures[-1])
    theta, _ = _minimise(make_objective(temperatures[0]), grid, top)
    with torch.no_grad():
        best, val = theta, float(exact(theta)[0])
    for t in temperatures[1:]:
        objective = make_objective(t)
        with torch.no_grad():  # the same minimiser, rescaled to start at 1 (see the docstring)
            scale = objective(theta).clamp_min(1e-300)
        theta, _ = _lbfgs(lambda th: objective(th) / scale, theta, iters)
        with torch.no_grad():
            v = float(torch.nan_to_num(exact(theta), nan=math.inf)[0])
        if v <= val:
            best, val = theta, v
    return best, val


def _huber_objective(law, logN, logU, logD, logL, base=None, temperature=0.0):
    def objective(th):
        r = _log_predict(law, _coords(law, th, base), logN, logU, logD, temperature) - logL  # (K, runs)
        return F.huber_loss(r, torch.zeros_like(r), reduction="none", delta=HUBER_DELTA).sum(-1)

    return objective


def _runs(N, U, D, loss):
    """Float arrays of one shape, all finite and > 0; D = U where D is None."""
    N, U, loss = (np.asarray(x, float) for x in (N, U, loss))
    D = U if D is None else np.asarray(D, float)
    if not N.shape == U.shape == D.shape == loss.shape:
        raise ValueError(f"N, U, D, loss must have one shape, got {N.shape} {U.shape} {D.shape} {loss.shape}")
    if not all(np.isfinite(x).all() and (x > 0).all() for x in (N, U, D, loss)):
        raise ValueError("N, U, D and loss must be finite and > 0")
    return N, U, D, loss


@_one_thread()
def fit(law, N, U, D, loss, top=8):
    """Fit `law` to runs (N, U, D, loss) by approach 3; D may be None (= U).

    Minimises sum_i Huber_1e-3(log L_pred(N_i, U_i) - log L_i) with L-BFGS from a grid of starts
    (Quanta: with its max smoothed, the smoothing annealed away; see QUANTA_TEMPERATURES).
    Returns a Fit with .params (keys as in the law's signature), in-sample .rmse and .mae, and
    .objective, all computed with the exact law.
    """
    if law not in PARAMS:
        raise ValueError(f"unknown law {law!r}; choose one of {', '.join(LAWS)}")
    N, U, D, loss = _runs(N, U, D, loss)
    t = lambda x: torch.as_tensor(np.log(x), dtype=torch.float64)
    logN, logU, logD, logL = t(N), t(U), t(D), t(loss)
    if law == "muennighoff":  # step 1: base law in (N, D) on the single-epoch rows
        single = D <= U * (1 + 1e-9)
        s = torch.as_tensor(single if single.any() else np.ones_like(single))
        obj = _huber_objective("chinchilla", logN[s], logD[s], None, logL[s])
        th, _ = _minimise(obj, _grid("chinchilla"), top)
        base = {k: v.detach() for k, v in _coords("chinchilla", th).items()}
        obj = _huber_objective(law, logN, logU, logD, logL, base)  # step 2: R_D*, R_N*
        th, val = _minimise(obj, _grid(law), top=4)
        params = _natural(_coords(law, th, base))
        # R_D* (R_N*) is unconstrained without repeated data (parameters): keep the published value
        if single.all():
            params["rd_star"] = PUBLISHED_RD_STAR
        if (N <= muennighoff_U_N(N, U, *(params[k] for k in ("A", "B", "alpha", "beta")))).all():
            params["rn_star"] = PUBLISHED_RN_STAR
    elif law == "quanta":
        th, val = _minimise_annealed(lambda t: _huber_objective(law, logN, logU, logD, logL, temperature=t),
                                     _grid(law), top)
        params = _natural(_coords(law, th))
    else:
        th, val = _minimise(_huber_objective(law, logN, logU, logD, logL), _grid(law), top)
        params = _natural(_coords(law, th))
    params = {k: params[k] for k in PARAMS[law]}
    err = predict(law, params, N, U, D) - loss
    return Fit(law, params, float(np.sqrt(np.mean(err**2))), float(np.mean(np.abs(err))), val)


# -----------------------------------------------------------------------------
# Metrics: extrapolation, fan-out, effective-data multiplier


@dataclass
class Extrapolation:
    fit: Fit  # fitted on every budget but the largest
    budget: float  # the held-out U
    rmse: float  # on the held-out rows, loss units
    mae: float


def extrapolate(law, N, U, D, loss):
    """Fit on all but the largest unique-data budget U, report the error on that budget."""
    N, U, D, loss = _runs(N, U, D, loss)
    held = U == U.max()
    if held.all():
        raise ValueError("extrapolation needs at least two unique-data budgets U")
    f = fit(law, N[~held], U[~held], D[~held], loss[~held])
    err = f.predict(N[held], U[held], D[held]) - loss[held]
    return Extrapolation(f, float(U.max()), float(np.sqrt(np.mean(err**2))), float(np.mean(np.abs(err))))


def fan_out(N, U, loss, u_small=None, u_large=None):
    """Slope of the gap L(u_small) - L(u_large) against log10 N, over the N both budgets ran.

    Loss per decade of N; > 0 means the gap between data budgets grows with model size. Defaults:
    the smallest and the largest U. Repeated (N, U) rows (seeds, epochs) are averaged.
    """
    N, U, loss = (np.asarray(x, float) for x in (N, U, loss))
    u_small = U.min() if u_small is None else u_small
    u_large = U.max() if u_large is None else u_large
    mean = lambda u: {n: loss[(U == u) & (N == n)].mean() for n in np.unique(N[U == u])}
    small, large = mean(u_small), mean(u_large)
    common = sorted(small.keys() & large.keys())
    if len(common) < 2:
        raise ValueError("fan-out needs at least two model sizes N run at both budgets")
    gap = [small[n] - large[n] for n in common]
    return float(np.polyfit(np.log10(common), gap, 1)[0])


def effective_data_multiplier(law, params, N, U, loss, D=None, lo=1e-3, hi=1e3, iters=100):
    """U* / U, where the baseline's fitted law at (N, U*, D) reaches the treatment's `loss`.

    Bisection in log U over [U * lo, U * hi]; D (tokens seen, i.e. compute) is held fixed and
    defaults to U. nan where the target is outside the bracket (e.g. below the law's U -> inf limit).
    """
    N, U, loss = np.broadcast_arrays(*(np.asarray(x, float) for x in (N, U, loss)))
    D = U if D is None else np.broadcast_to(np.asarray(D, float), U.shape)
    f = lambda logu: predict(law, params, N, np.exp(logu), D)  # decreasing in U
    a, b = np.log(U * lo), np.log(U * hi)
    ok = (f(a) >= loss) & (f(b) <= loss)
    for _ in range(iters):
        mid = (a + b) / 2
        above = f(mid) > loss  # still worse than the treatment: need more data
        a, b = np.where(above, mid, a), np.where(above, b, mid)
    return np.where(ok, np.exp((a + b) / 2) / U, np.nan)


# -----------------------------------------------------------------------------
# Command line

COLUMNS = ("N", "U", "D", "loss")
EXPECTED = "a header line N,U,D,loss then one row per run (D = tokens seen; D = U for single-epoch runs)"


def read_runs(path):
    """Read a CSV with columns N,U,D,loss (one row per run) -> dict of float arrays.

    Raises UserError (one line naming the file and the fix) for an unreadable file, a missing
    column, a missing, non-numeric, non-finite or non-positive value, or D < U.
    """
    try:
        with open(path, newline="") as f:
            rows = [(i, row) for i, row in enumerate(csv.reader(f), 1) if any(x.strip() for x in row)]
    except FileNotFoundError:
        raise UserError(f"{path}: no such file; give the path of a CSV with {EXPECTED}") from None
    except IsADirectoryError:
        raise UserError(f"{path}: is a directory; give the path of a CSV file with {EXPECTED}") from None
    except PermissionError:
        raise UserError(f"{path}: permission denied; make the file readable") from None
    except (UnicodeDecodeError, csv.Error) as e:
        raise UserError(f"{path}: not a readable CSV ({e}); give a text CSV with {EXPECTED}") from None
    except OSError as e:  # e.g. a device or /proc file that cannot be read
        raise UserError(f"{path}: cannot read it ({e.strerror or e}); give the path of a CSV file with "
                        f"{EXPECTED}") from None
    if not rows:
        raise UserError(f"{path}: the file is empty; it needs {EXPECTED}")
    header = [h.strip() for h in rows[0][1]]
    missing = [c for c in COLUMNS if c not in header]
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)} (found {','.join(header)}); "
                         f"the file needs {EXPECTED}")
    if len(rows) < 2:
        raise UserError(f"{path}: no runs under the header; add one row per run (N,U,D,loss)")
    runs = {}
    for c in COLUMNS:
        j = header.index(c)
        values = []
        for line, row in rows[1:]:
            cell = row[j].strip() if j < len(row) else ""
            try:
                v = float(cell)
            except ValueError:
                raise UserError(f"{path}: line {line}: column {c} is {cell!r}, not a number; "
                                 f"write a number (e.g. 1.5e9) in every row") from None
            if not (math.isfinite(v) and v > 0):
                raise UserError(f"{path}: line {line}: column {c} is {cell}; it must be finite and > 0")
            values.append(v)
        runs[c] = np.array(values)
    bad = np.flatnonzero(runs["D"] < runs["U"] * (1 - 1e-9))
    if len(bad):
        raise UserError(f"{path}: line {rows[1 + bad[0]][0]}: D < U (D counts every token seen, so D >= U; "
                         f"D = U for a single-epoch run)")
    return runs


def _fmt(params):
    return " ".join(f"{k}={v:.4g}" for k, v in params.items())


def _enough(path, n, law):
    if n < len(PARAMS[law]):
        raise UserError(f"{path}: {n} run(s) are too few to fit {law}'s {len(PARAMS[law])} parameters; "
                         f"give at least {len(PARAMS[law])} runs")


def cmd_fit(args):
    r = read_runs(args.csv)
    _enough(args.csv, len(r["N"]), args.law)
    f = fit(args.law, r["N"], r["U"], r["D"], r["loss"])
    print(f"{args.law} on {len(r['N'])} runs: {_fmt(f.params)}")
    print(f"in-sample RMSE {f.rmse:.5f}  MAE {f.mae:.5f}")
    if args.json:
        print(json.dumps(f.params))


def cmd_compare(args):
    r = read_runs(args.csv)
    N, U, D, L = r["N"], r["U"], r["D"], r["loss"]
    for law in LAWS:
        _enough(args.csv, len(N), law)
    if args.png is not None:  # fail before the fits, not after
        check_png(args.png)
    budgets = np.unique(U)
    print(f"{len(N)} runs, N {N.min():.3g}..{N.max():.3g}, "
          f"{len(budgets)} budgets U {budgets.min():.3g}..{budgets.max():.3g}")

    def fan(loss):  # loss per decade of N, smallest budget minus largest
        try:
            return f"{round(fan_out(N, U, loss), 4) + 0.0:+.4f}"  # + 0.0: no "-0.0000"
        except ValueError:
            return "n/a"

    print(f"fan-out of the data: {fan(L)} loss per decade of N "
          f"(L at U={budgets.min():.3g} minus L at U={budgets.max():.3g})")
    print(f"extrapolation: fit without U={budgets.max():.3g}, error on it "
          f"(n/a: one budget, or too few runs without it)")
    print(f"{'law':<16} {'RMSE':>8} {'MAE':>8} {'ext RMSE':>9} {'ext MAE':>8} {'fan-out':>8}  parameters")
    fits = {}
    for law in LAWS:
        fits[law] = f = fit(law, N, U, D, L)
        ext = f"{'n/a':>9} {'n/a':>8}"
        if len(budgets) > 1 and (U < budgets.max()).sum() >= len(PARAMS[law]):
            x = extrapolate(law, N, U, D, L)
            ext = f"{x.rmse:9.5f} {x.mae:8.5f}"
        print(f"{law:<16} {f.rmse:8.5f} {f.mae:8.5f} {ext} {fan(f.predict(N, U, D)):>8}  {_fmt(f.params)}")
    if args.png is not None:
        plot(N, U, D, L, fits, args.png)
        print(f"wrote {args.png}")


IMAGE_FORMATS = ("png", "pdf", "svg", "jpg", "jpeg")


def check_png(path):
    """--png PATH must name an image file (.png, .pdf, .svg, .jpg) in a folder where a file can be
    written: a UserError of one line before any fit (matplotlib would append .png to a path
    without one, and fail on an unknown suffix only after the fits)."""
    fmt = os.path.splitext(str(path))[1].lower().lstrip(".")
    if str(path).strip() and not os.path.isdir(path) and fmt not in IMAGE_FORMATS:
        raise UserError(f"--png {path}: {'no' if not fmt else 'an unknown'} image suffix; end the path in .png "
                        f"(or .{', .'.join(IMAGE_FORMATS[1:])})")
    check_output(path, "--png", example="laws.png")


def plot(N, U, D, L, fits, path):
    """Loss vs N per budget U (points), each law's fitted curves in its own panel."""
    try:
        import matplotlib
    except ImportError:
        raise UserError("--png needs matplotlib: pip install matplotlib (or leave out --png)") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budgets = np.unique(U)
    colors = plt.cm.viridis(np.linspace(0, 0.9, len(budgets)))
    cols = math.ceil(len(fits) / 2)
    fig, axes = plt.subplots(2, cols, figsize=(5.5 * cols, 8), sharex=True, sharey=True, squeeze=False)
    grid = np.geomspace(N.min(), N.max(), 100)
    for ax, (law, f) in zip(axes.flat, fits.items()):
        for u, c in zip(budgets, colors):
            m = U == u
            n = np.unique(N[m])  # D along the curve: this budget's mean log D at each N, interpolated
            logd = [np.log(D[m & (N == x)]).mean() for x in n]
            d = np.exp(np.interp(np.log(grid), np.log(n), logd))
            ax.scatter(N[m], L[m], color=c, s=12, label=f"U={u:.2g}")
            ax.plot(grid, f.predict(grid, np.full_like(grid, u), d), color=c, lw=1)
        ax.set(xscale="log", yscale="log", xlabel="N (parameters)", ylabel="loss", title=f"{law}  RMSE {f.rmse:.4f}")
    for j in range(len(fits) - cols, cols):  # an empty bottom panel: its column's top one shows the N ticks
        axes[1, j].set_visible(False)
        axes[0, j].xaxis.set_tick_params(labelbottom=True)
    axes.flat[0].legend(fontsize=7)
    fig.tight_layout()
    tmp = os.path.join(os.path.dirname(os.path.abspath(path)), f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        fig.savefig(tmp, dpi=110, format=os.path.splitext(str(path))[1].lstrip(".").lower() or "png")
        os.replace(tmp, path)
    except OSError as e:
        raise UserError(f"--png {path}: cannot write it ({e.strerror or e}); choose a writable path") from None
    except ValueError as e:  # e.g. an extension matplotlib has no writer for
        raise UserError(f"--png {path}: {e}; end the path in .png") from None
    finally:
        plt.close(fig)
        with contextlib.suppress(OSError):
            os.remove(tmp)


def main(argv=None):
    """The command line. A bad input (file, column, value, too few runs) or a bad command line ends
    in one line on stderr, `scaling.py: error: ...`, naming the input and the fix, and SystemExit
    with status 2 (argparse's for a bad command line, and ours for a bad input); no traceback."""
    p = ArgumentParser(prog="scaling.py", formatter_class=argparse.RawDescriptionHelpFormatter,
                description="Fit and compare scaling laws L(N, U[, D]) on a CSV of runs with columns\n"
                "N (parameters), U (unique tokens), D (tokens seen, >= U), loss.",
                epilog="laws (parameters): what they are\n"
                + "".join(f"  {k} ({', '.join(v)}): {DESCRIPTION[k]}\n" for k, v in PARAMS.items())
                + "examples:\n  python scaling.py fit runs.csv --law softq --json\n"
                "  python scaling.py compare runs.csv --png laws.png")
    sub = p.add_subparsers(dest="cmd", required=True, metavar="{fit,compare}")
    f = sub.add_parser("fit", help="fit one law and print its parameters, RMSE and MAE")
    f.add_argument("csv", help="CSV with columns N,U,D,loss, one row per run")
    f.add_argument("--law", choices=LAWS, default="softq",
                   help="which law to fit (default: %(default)s, the paper's): "
                   + "; ".join(f"{k}: {v}" for k, v in DESCRIPTION.items()))
    f.add_argument("--json", action="store_true", help="print the fitted parameters as JSON on the last line")
    f.set_defaults(run=cmd_fit)
    c = sub.add_parser("compare", help="fit every law (" + ", ".join(LAWS) + "); table of parameters, "
                       "RMSE, MAE, extrapolation error, fan-out")
    c.add_argument("csv", help="CSV with columns N,U,D,loss, one row per run")
    c.add_argument("--png", help="write a plot of loss vs N per budget U with each law's curves here")
    c.set_defaults(run=cmd_compare)
    args = p.parse_args(argv)
    try:
        args.run(args)
    except UserError as e:
        print(f"scaling.py: error: {' '.join(str(e).split())}", file=sys.stderr)  # one line, whatever e holds
        raise SystemExit(2) from None


if __name__ == "__main__":
    main()
