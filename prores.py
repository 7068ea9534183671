"""
ProRes: progressive residual warmup, the alpha(l, t) schedules and the hook that writes them.
Chen et al., arXiv 2603.05369, the method's schedule alpha(l, t) = min(t / (T * l), 1) (the
variants below are its warmup-schedule ablation); T = 1000 steps per layer in the paper (500 for
its 96-120-layer models). The authors' code (github.com/dandingsky/ProRes) computes the
schedules in torchrun_main.py:361-417 (before the first update) and 470-494 (after each
update), and multiplies alpha into the branches in peft_pretraining/modeling_llama.py:419-497
(the `*_prores` norm types).

Each block l = 1..L (1 = closest to the input) scales both of its residual branches by
alpha(l, t), t = optimizer updates done so far (0 before the first update), e.g. Pre-LN:
    x_{l+1} = x_l + alpha(l, t) * F(Norm(x_l))
so at t = 0 the network is the identity from the embeddings to the final norm; the shallow
layers switch on first. The model holds alpha in one buffer, `GPT.residual_scale` (shape
(L,), default ones); this module only writes it, IN PLACE, so a torch.compile'd model keeps
its graph (the buffer is a graph input, its values are data, not constants).

    hook = ProRes(model, T=1000)     # model may be wrapped in DDP and/or torch.compile
    for step in range(iters):
        hook.update(step)            # before the forward pass of update `step`
        ...forward, backward, optimizer.step()

In a curriculum (train.py --prores-scope). The paper warms up a model trained from scratch: at t = 0
every block is switched off and the shallow ones switch on first, so that the deep ones start learning on
a settled input. A block that arrives trained from the previous stage has nothing to warm up: ramping
it from 0 again switches off what the transfer brought, while the new stage's lr is at its peak.
  fresh (default)  only a stage whose blocks start from random init warms up: the first stage of a run
                   trained from scratch, or a stage whose --transfer brings no attention or MLP weights;
                   a stage whose blocks arrive trained (transferred, --init-from) keeps alpha = 1;
  stage            every stage warms up from 0 again, its transferred blocks too: they
                   are scaled down and switched back on over the stage;
  run              one warmup over the whole curriculum (T auto from the run's steps): alpha never falls
                   at a stage boundary, but blocks may arrive trained while their alpha is still below 1.
Why fresh is the default, measured (the three scopes on the headline command, three seeds each): RESULTS.md,
experiments/results/ladder-headline.

Once every layer has reached its final value the hook stops touching the model (`done`).
Every schedule, the fixed ones too, ends at alpha = 1: the authors switch the model back to its
plain norm type once the warmup of P = T * L updates is over (torchrun_main.py:416-417 and 491-493,
RESET_NORM_TYPE defaults to true), whatever the schedule held until then.
"""

import math

import torch

SCOPES = ("fresh", "stage", "run")  # train.py --prores-scope: which stages of a curriculum warm up (see above)


def ramps(scope, blocks_trained):
    """Whether a stage of a curriculum warms up: always with scope "stage" or "run"; with "fresh"
    only when its blocks start from random init (blocks_trained: the stage received attention or
    MLP weights from the previous stage or --init-from)."""
    if scope not in SCOPES:
        raise ValueError(f"unknown ProRes scope {scope!r}; choose one of {SCOPES}")
    return scope != "fresh" or not blocks_trained


# The schedules: name -> (alpha_fn, fixed). alpha_fn(t, l, L, T) gives the raw alpha(l, t) of every layer
# at step t (l: the float64 layer numbers 1..L, a tensor); `alpha` clips it to [0, 1]. A warmup (fixed
# False) reaches 1 for every layer by t = T * L; a fixed schedule (fixed True) is held through t = T * L,
# then alpha = 1. To add a schedule: one entry here (then --prores-schedule takes it) and a test; a
# schedule of the authors' code also gets its name in tests/test_prores_schedule.py's THEIRS.
def _stagewise_from(floor):
    """Layer l ramps only inside its own window [(l-1)T, lT], from the floor a_l up to 1."""
    return lambda t, l, L, T: torch.maximum(floor(l, L) + (1 - floor(l, L)) * (t - (l - 1) * T) / T, floor(l, L))


SCHEDULES = {
    "linear": (lambda t, l, L, T: t / (T * l), False),                       # the paper's
    "equal": (lambda t, l, L, T: torch.full_like(l, t / (T * L)), False),
    "reverse": (lambda t, l, L, T: t / (T * (L - l + 1)), False),
    "sqrt": (lambda t, l, L, T: (t / (T * l)).sqrt(), False),
    "square": (lambda t, l, L, T: (t / (T * l)) ** 2, False),
    "stagewise": (_stagewise_from(lambda l, L: torch.zeros_like(l)), False),
    "stagewise-1/L": (_stagewise_from(lambda l, L: torch.full_like(l, 1.0 / L)), False),
    "stagewise-1/sqrt(L)": (_stagewise_from(lambda l, L: torch.full_like(l, 1.0 / math.sqrt(L))), False),
    "stagewise-1/sqrt(l)": (_stagewise_from(lambda l, L: 1.0 / l.sqrt()), False),
    "fixed-1/L": (lambda t, l, L, T: torch.full_like(l, 1.0 / L), True),
    "fixed-1/sqrt(L)": (lambda t, l, L, T: torch.full_like(l, 1.0 / math.sqrt(L)), True),
    "fixed-1/sqrt(l)": (lambda t, l, L, T: 1.0 / l.sqrt(), True),
}
STAGEWISE_FLOORS = ("stagewise-1/L", "stagewise-1/sqrt(L)", "stagewise-1/sqrt(l)")   # they start at their floor
WARMUPS = tuple(n for n, (_, fixed) in SCHEDULES.items() if not fixed)
FIXED = tuple(n for n, (_, fixed) in SCHEDULES.items() if fixed)


def _check(schedule, T):
    if schedule not in SCHEDULES:
        raise ValueError(f"unknown ProRes schedule {schedule!r}; choose one of {tuple(SCHEDULES)}")
    if not (T is not None and T > 0):
        raise ValueError(f"ProRes schedule {schedule!r} needs T > 0 (steps per layer; the warmup lasts T * L "
                         f"steps, a fixed schedule is held that long), got {T!r}")


def alpha(step, n_layer, T, schedule="linear"):
    """The residual scales at update step t = `step`: a float32 tensor of shape (n_layer,)
    whose entry l-1 is alpha(l, t) for layer l = 1..L (L = n_layer).

    The paper's schedule (arXiv 2603.05369):
        linear      alpha(l, t) = min(t / (T * l), 1)         layer l is fully on after T*l steps
    The variants of the authors' code (all clipped to [0, 1]):
        equal       alpha(l, t) = min(t / (T * L), 1)          every layer ramps together
        reverse     alpha(l, t) = min(t / (T * (L - l + 1)), 1)  deepest layer first
        sqrt        alpha(l, t) = min((t / W_l)^(1/2), 1),  W_l = T * l
        square      alpha(l, t) = min((t / W_l)^2, 1),      W_l = T * l
        stagewise   alpha(l, t) = clip((t - (l - 1) * T) / T, 0, 1)   layer l ramps only
                                                          inside its own window [(l-1)T, lT]
        stagewise-<floor>  the same window, but from a floor a_l instead of 0:
                    alpha(l, t) = clip(a_l + (1 - a_l) * (t - (l - 1) * T) / T, a_l, 1)
                    with a_l = 1/L, 1/sqrt(L) or 1/sqrt(l) (the authors' stagewise_L,
                    stagewise_sqrt_L, stagewise_sqrt_l: torchrun_main.py:390-405 of
                    dandingsky/ProRes, whose window ends W_l = T * l are ours)
        fixed-1/L        alpha(l, t) = 1 / L        for t <= T * L, then 1
        fixed-1/sqrt(L)  alpha(l, t) = 1 / sqrt(L)   for t <= T * L, then 1
        fixed-1/sqrt(l)  alpha(l, t) = 1 / sqrt(l)   for t <= T * L, then 1
                    (the authors' fix_L, fix_sqrt_L, fix_sqrt_l: set once, torchrun_main.py:406-412,
                    left alone while update_step <= P = prores_warmup_steps (473, 488-489), then the
                    model returns to its plain norm type, alpha = 1 (491-493))
    Every warmup schedule is 1 for every layer from t = T * L on, every fixed one from the first
    step after T * L (see `ramp_steps`); every warmup is 0 for every layer at t = 0 except the
    stagewise schedules with a floor, which start at it.
    """
    _check(schedule, T)
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    fn, fixed = SCHEDULES[schedule]
    L, t = n_layer, float(step)
    l = torch.arange(1, L + 1, dtype=torch.float64)  # (L,) layer numbers 1..L
    if fixed and t > T * L:  # a fixed schedule after its hold: the plain model
        return torch.ones(L)
    if not fixed and t >= T * L:  # every warmup has ended (guards a schedule that would not reach 1 alone)
        return torch.ones(L)
    return fn(t, l, L, T).clamp(0.0, 1.0).float()


def ramp_steps(n_layer, T, schedule="linear"):
    """The first step at which every layer has its final value, 1: ceil(T * L) for every warmup
    schedule (the last layer to switch on, l = L for linear/sqrt/square/stagewise, l = 1 for
    reverse, all of them for equal, needs T * L steps); floor(T * L) + 1 for the fixed schedules,
    the first step after their hold (t <= T * L, as the authors' `update_step <= P`)."""
    _check(schedule, T)
    return math.floor(T * n_layer) + 1 if SCHEDULES[schedule][1] else math.ceil(T * n_layer)


def unwrap(model):
    """The raw module under DDP (`.module`) and torch.compile (`._orig_mod`) wrappers."""
    while True:
        for attr in ("module", "_orig_mod"):
            inner = getattr(model, attr, None)
            if isinstance(inner, torch.nn.Module):
                model = inner
                break
        else:
            return model


class ProRes:
    """Writes alpha(l, step) into `model.residual_scale` in place before each update.

    model: the GPT, raw or wrapped (DDP, torch.compile); T: steps per layer (the paper uses
    1000, 500 for 96-120 layers); schedule: one of SCHEDULES. `update(step)` is a pure
    function of the step, so a resumed run only has to call it with the resumed step.
    """

    def __init__(self, model, T, schedule="linear"):
        _check(schedule, T)
        self.model = unwrap(model)
        if not isinstance(getattr(self.model, "residual_scale", None), torch.Tensor):
            raise TypeError(f"{type(self.model).__name__} has no `residual_scale` buffer for ProRes to write")
        self.T, self.schedule = T, schedule
        self.n_layer = self.model.residual_scale.numel()
        self.end = ramp_steps(self.n_layer, T, schedule)
        self._done = False

    @property
    def done(self):
        """True once the buffer holds its final values, all ones (after the warmup, or after a
        fixed schedule's hold): from then on `update` does nothing."""
        return self._done

    @torch.no_grad()
    def update(self, step):
        """Write alpha(., step) into the model's buffer; returns False once `done`."""
        if self._done:
            return False
        # look the buffer up each time: model.to(device) replaces it with a new tensor
        self.model.residual_scale.copy_(alpha(step, self.n_layer, self.T, self.schedule))
        self._done = step >= self.end
        return True
