"""The kernel refresh of the GP-LSTM paper's Algorithms 1-2 (Al-Shedivat et al., JMLR 2017, Sec. 4.1),
a trainer hook of the recurrent family's semi-stochastic stages.

Every tau = ``kernel_refresh_every`` minibatch W steps (Algorithm 1: tau = 1) a refresh embeds all
training windows, checks whether the NLML rose during the stale steps by more than the rises' own
minibatch noise (then lr_W is halved, at most 4 times net, and restored once the rises are calm:
:class:`RefreshGuard`; both NLMLs on the same probe vectors for structured KISS, and under the same
dropout masks), runs ``theta_steps`` full-data steps on the kernel hyperparameters and noise, and
recomputes the cotangents of ``objectives.recurrent.CotangentSurrogate``. With dropout a refresh draws
one mask set per window, used by its embedding, theta steps and cotangents and by the batch
Jacobians until the next refresh.
"""

from __future__ import annotations

import contextlib
import math
import statistics

import torch

from ..objectives.recurrent import refresh_cotangents
from .optim import make_optimizer

_CHECK_TOL = 1e-3  # nats per window: the floor of RefreshGuard's tolerance
# nats per window (standardised targets): a rise above this halves lr_W whatever the noise. Measured on
# Actuator regression at 256 units (issue 40): stale-step overshoots of 0.2-1.0, plateau noise |rise| <= 0.01
_BIG_RISE = 0.05


class RefreshGuard:
    """The refresh check's decision on lr_W (gpdlm's remedy for Lemma 3's stale-K condition, spec
    "Algorithm 2"; the paper's Algorithm 2 itself has no check). At each refresh it sees the rise
    r = NLML(h_now, theta)/N - NLML(h_old, theta)/N over the stale W steps since the last refresh.

    Minibatch steps make r noisy even when training is stable, so a rise alone is no evidence of
    instability (the 1e-3-nats rule before issue 40 fired on about half of all refreshes of Algorithm 1
    and froze lr_W after 10 halvings). The guard keeps the rises seen at the current lr_W (at most
    ``window``) and their noise scale s = 1.4826 MAD (their spread about their median: the steady
    descent goes into the median, the minibatch noise into s). It halves lr_W when (the last two tests
    from ``min_rises`` rises at the current lr_W on)

    * a rise is an overshoot: r > ``big`` (0.05 nats per window on standardised targets; minibatch noise
      on a plateau measured <= 0.01, the stale-step overshoots of Actuator regression at 256 units 0.2-1.0),
    * one rise is significant: r > floor + z s (a jump out of the noise), or
    * the rises are systematically positive: at least 4 rises with median > floor + z s / sqrt(k);

    never more than ``max_halvings`` net halvings (lr_W >= lr / 2^max_halvings), and after each change
    the statistics restart. It doubles lr_W back (up to its starting value) after ``window`` refreshes
    at the current lr_W without a halving whose median rise is <= floor (training descends or sits
    in noise), so a halving caused by a transient cannot freeze the network. ``observe`` returns the
    factor to apply to lr_W: 0.5, 2.0 or 1.0."""

    def __init__(
        self,
        *,
        floor: float = _CHECK_TOL,
        z: float = 4.0,
        window: int = 8,
        max_halvings: int = 4,
        min_rises: int = 3,
        big: float = _BIG_RISE,
    ):
        self.floor, self.z, self.window, self.max_halvings, self.big = floor, z, window, max_halvings, big
        self.min_rises = min_rises
        self.rises: list[float] = []
        self.level = 0  # net halvings in force: lr_W = lr_start / 2^level
        self.halvings, self.restores = 0, 0

    def observe(self, rise: float) -> float:
        self.rises.append(float(rise))
        k = len(self.rises)
        halve = rise > self.big  # an overshoot, never minibatch noise
        if k >= self.min_rises:  # enough rises to tell a smaller one from the noise
            med = statistics.median(self.rises)
            s = 1.4826 * statistics.median(abs(r - med) for r in self.rises)  # robust: a jump does not inflate it
            jump = rise > self.floor + self.z * s
            trend = k >= 4 and med > self.floor + self.z * s / math.sqrt(k)
            halve = halve or jump or trend
        if halve and self.level < self.max_halvings:
            self.level += 1
            self.halvings += 1
            self.rises = []
            return 0.5
        if len(self.rises) >= self.window:
            calm = statistics.median(self.rises) <= self.floor
            self.rises = self.rises[-self.window :]
            if calm and self.level > 0:
                self.level -= 1
                self.restores += 1
                self.rises = []
                return 2.0
        return 1.0

    def state(self) -> dict:
        """The guard's state (a checkpoint's): the rises at the current lr_W, the level and the counts."""
        return {"rises": list(self.rises), "level": self.level, "halvings": self.halvings, "restores": self.restores}

    def load_state(self, state: dict) -> None:
        self.rises = [float(r) for r in state["rises"]]
        self.level, self.halvings, self.restores = int(state["level"]), int(state["halvings"]), int(state["restores"])


@contextlib.contextmanager
def fixed_probes(seed: int | None):
    """KISS: fix the stochastic-Lanczos probe vectors (gpytorch draws them from torch's global
    generator) so one refresh's NLML and cotangents are one deterministic function."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class KernelRefresh:
    """Algorithm 2's kernel refresh every ``tau`` W steps (a trainer hook; see the module docstring):
    ``model`` a ``models.deep_kernel.DeepKernelGP``, ``surrogate`` its
    ``objectives.recurrent.CotangentSurrogate``, (``x``, ``y``) the training windows; ``theta_lr``
    the Adam learning rates of the ``kernel`` and ``likelihood`` groups; ``probe_seed``: structured
    KISS's probe vectors are seeded ``probe_seed + refresh number``; ``masks``: the dropout-mask
    generator (None: no dropout)."""

    def __init__(
        self,
        model,
        surrogate,
        x,
        y,
        *,
        tau: int,
        theta_steps: int,
        theta_lr: dict,
        check: bool = True,
        probe_seed: int | None = None,
        masks: torch.Generator | None = None,
    ):
        self.model, self.surrogate, self.x, self.y = model, surrogate, x, y
        self.n = x.shape[0]
        self.tau, self.theta_steps, self.check, self.probe_seed = tau, theta_steps, check, probe_seed
        self.mask_generator = masks  # dropout: one mask set per window and refresh, drawn from it
        self.masks = None
        self._cotangents = refresh_cotangents
        groups = model.groups()
        self.theta_opt = make_optimizer(
            "adam",
            [
                {"params": groups["kernel"], "lr": theta_lr["kernel"], "name": "kernel"},
                {"params": groups["likelihood"], "lr": theta_lr["likelihood"], "name": "likelihood"},
            ],
        )
        self.opt = None
        self.h_prev: torch.Tensor | None = None
        self.last: torch.Tensor | None = None
        self.guard = RefreshGuard()
        self.refreshes, self.drift = 0, float("nan")
        self.drifts: list[float] = []

    @property
    def halvings(self) -> int:
        """lr_W halvings so far (each restore undoes one; ``restores``)."""
        return self.guard.halvings

    @property
    def restores(self) -> int:
        return self.guard.restores

    def bind_optimizer(self, opt) -> None:
        self.opt = opt

    def after_step(self, iteration: int, epoch: int) -> None:
        if iteration % self.tau == 0:
            self.refresh()

    def _value(self, h: torch.Tensor, seed: int | None) -> torch.Tensor:
        """NLML(h)/N at the current theta, on the grid fitted to ``h``, with the probes of ``seed``."""
        self.model.fit_grid(h)
        with fixed_probes(seed), torch.no_grad():
            return self.model.nlml(h, self.y) / self.n

    def refresh(self) -> None:
        model, n = self.model, self.n
        dropout = self.mask_generator is not None and model.network.stochastic
        with torch.no_grad():
            # the W steps since the last refresh descended L(W; M_old): the check and the drift compare
            # embeddings under the same masks; then new masks for the next interval
            h_now = model.embed(self.x, masks=self.masks)
            masks = model.network.draw_masks(n, self.mask_generator) if dropout else None
            h = model.embed(self.x, masks=masks) if dropout else h_now
        seed = None if self.probe_seed is None else self.probe_seed + self.refreshes
        if self.check and self.last is not None and self.opt is not None:
            # the rise NLML(h_now, theta) - NLML(h_old, theta): both sides on the same probe vectors (the
            # structured KISS path is a stochastic estimate; its draws would otherwise decide the check)
            new = self._value(h_now, seed)
            old = self.last if seed is None or model.is_dense(n) else self._value(self.h_prev, seed)
            rise = float(new - old)  # one host sync per refresh
            factor = self.guard.observe(rise)
            if factor != 1.0:
                for g in self.opt.param_groups:
                    g["base_lr"] = g.get("base_lr", g["lr"]) * factor
                    g["lr"] *= factor
        model.fit_grid(h)
        with fixed_probes(seed):
            if self.h_prev is not None:
                self.drift = float((h_now - self.h_prev).pow(2).sum(1).mean().sqrt())
                self.drifts.append(self.drift)
            for _ in range(self.theta_steps):
                self.theta_opt.zero_grad(set_to_none=True)
                loss = model.nlml(h, self.y) / n
                loss.backward()
                self.theta_opt.step()
            c, value = self._cotangents(model, h, self.y, n)
        self.surrogate.set_cotangents(c, value, masks)
        self.h_prev, self.last, self.masks = h, value, masks
        self.refreshes += 1

    def checkpoint_state(self) -> dict:
        """Everything a resumed stage needs to refresh and step exactly as the uninterrupted one: the
        theta optimiser's state, the last refresh's embedding, NLML, dropout masks and cotangents (the
        surrogate's), the guard, the counts and drifts, and the dropout-mask generator's state. (lr_W's
        halvings live in the loop optimiser's param groups, which the loop's state holds.)"""
        sur = self.surrogate
        return {
            "theta_opt": self.theta_opt.state_dict(),
            "h_prev": self.h_prev,
            "last": self.last,
            "masks": self.masks,
            "cotangents": sur.cotangents,
            "value": sur.value,
            "guard": self.guard.state(),
            "refreshes": self.refreshes,
            "drift": self.drift,
            "drifts": list(self.drifts),
            "mask_generator": None if self.mask_generator is None else self.mask_generator.get_state(),
        }

    def load_checkpoint_state(self, state: dict) -> None:
        self.theta_opt.load_state_dict(state["theta_opt"])
        dev = self.x.device

        def to(t):
            return None if t is None else t.to(dev)

        masks = state["masks"]
        if masks is not None:
            masks = {k: [to(m) for m in v] for k, v in masks.items()}
        self.h_prev, self.last, self.masks = to(state["h_prev"]), to(state["last"]), masks
        if state["cotangents"] is not None:
            self.surrogate.set_cotangents(to(state["cotangents"]), to(state["value"]), masks)
        self.guard.load_state(state["guard"])
        self.refreshes, self.drift = int(state["refreshes"]), float(state["drift"])
        self.drifts = [float(d) for d in state["drifts"]]
        if self.mask_generator is not None and state["mask_generator"] is not None:
            self.mask_generator.set_state(state["mask_generator"])


class EpochTimer:
    """Time per epoch of a stage, evaluation excluded (the trainer's own accounting)."""

    def __init__(self):
        self.seconds_per_epoch = None

    def stage_end(self, result) -> None:
        if result.epochs > 0:
            self.seconds_per_epoch = result.train_seconds / result.epochs

    def checkpoint_state(self) -> dict:
        return {"seconds_per_epoch": self.seconds_per_epoch}

    def load_checkpoint_state(self, state: dict) -> None:
        v = state["seconds_per_epoch"]
        self.seconds_per_epoch = None if v is None else float(v)


class GeneratorState:
    """A stage hook that only carries a random generator's state through a checkpoint (e.g. the recurrent
    family's dropout-mask generator, which its objectives draw from and the run's generators do not hold)."""

    def __init__(self, generator: torch.Generator):
        self.generator = generator

    def checkpoint_state(self) -> dict:
        return {"state": self.generator.get_state()}

    def load_checkpoint_state(self, state: dict) -> None:
        self.generator.set_state(state["state"])


__all__ = ["EpochTimer", "GeneratorState", "KernelRefresh", "RefreshGuard", "fixed_probes"]
