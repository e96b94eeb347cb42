"""The recurrent family (Al-Shedivat et al., "Learning scalable deep kernels with recurrent
structure", JMLR 2017): GPs with recurrent deep kernels -- GP-LSTM, GP-GRU, GP-RNN, GP-NARX --
and the network baselines LSTM, GRU, RNN, NARX trained with MSE on the same windows.

A GP model is k(phi_W(x_bar), phi_W(x_bar')) on windows x_bar of a sequence dataset
(``gpdlm_cli.models.deep_kernel``); its training protocol (``trainer.algorithm``):

* ``full``: joint full-batch descent of NLML(W, theta)/N (Wilson et al. 2016a);
* ``delayed``: Algorithm 2 (Sec. 4.1), semi-stochastic with delayed kernel updates, in its unbiased
  cotangent form (``objectives.recurrent.CotangentSurrogate``). Every tau = ``kernel_refresh_every``
  minibatch steps (null: one epoch) a refresh embeds all training windows, checks whether the NLML
  rose during the stale steps by more than the rises' own minibatch noise (then lr_W is halved, at
  most 4 times net, and restored once the rises are calm: :class:`RefreshGuard`;
  ``trainer.refresh_check``; both NLMLs on the same probe vectors for structured KISS, and under the
  same dropout masks), runs
  ``theta_steps`` full-data steps on the kernel hyperparameters and noise, and recomputes the
  cotangents; the W steps in between use lr_W = lr / tau (``trainer.lr_over_tau``, Theorem 2's
  scaling). With dropout a refresh draws one mask set per window, used by its embedding, theta steps
  and cotangents and by the batch Jacobians until the next refresh;
* ``alternating``: Algorithm 1, i.e. Algorithm 2 with tau = 1.

All three end with ``final_theta_steps`` steps on theta with W fixed. ``model.init=pretrained``
first trains the matching baseline (the same body plus a linear head) with MSE for
``model.pretrain_epochs`` and keeps its recurrent layers (Sec. 5.2.3).

Predictions use dropout off; the GP's predictive variance is its own (no MC over dropout).
Free simulation (``dataset.mode=free_simulation``): trained on teacher-forced autoregressive
windows; evaluated by rolling forward over the whole (time-ordered) split from the L true past
targets of its first window, feeding back the predictive mean (Sec. 5.2.2's second definition;
no uncertainty propagation). Metrics: one-step ``rmse``/``nll``; ``sim_rmse`` and ``sim_nll`` over
that full trajectory; ``sim_rmse_h<k>``, the RMSE over the first k steps of free simulation, pooled
over every start in the split; ``train_nlml`` (per window,
standardised targets), ``lr_halvings``, ``lr_restores`` and ``lr_w_factor`` (lr_W's final factor),
``epoch_seconds``, ``embedding_drift`` (RMS change of h_i between
refreshes) and ``test_ms_per_point``; on the sysid sets (real and generated) ``data_abs_corr`` and ``data_snr``, Table
1's statistics of the run's own series.

Parameter groups: ``network`` (W), ``kernel`` (lengthscales, outputscale), ``likelihood`` (noise).
"""

from __future__ import annotations

import contextlib
import math
import statistics
import time

import numpy as np
import torch

from ..exceptions import DataError, UnsupportedCombination, param_error
from . import components as C
from .base import Method, Stage

MODELS = ("gp_lstm", "gp_gru", "gp_rnn", "gp_narx", "lstm", "gru", "rnn", "narx")
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (run/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = {m: True for m in ("gp_lstm", "gp_gru", "gp_rnn", "gp_narx")}
MULTI_OUTPUT = True  # independent GPs (or linear outputs) sharing one network
TAKES_FEATURES = False  # the network is the model's own (model.network), not `features=`
#: the trainer-group keys only this family reads (conf/trainer/*.yaml; base.DECLARATIONS)
PROTOCOL_KEYS = (
    "algorithm",
    "kernel_refresh_every",
    "theta_steps",
    "final_theta_steps",
    "lr_over_tau",
    "refresh_check",
)
ALGORITHMS = ("full", "alternating", "delayed")
MODES = ("regression", "autoregression", "free_simulation")
_DEFAULT_LR = 0.01  # Adam(0.01): App. E, Table 4
# trainer.keep_best=auto: the iterate with the lowest validation RMSE (App. E: "best models were selected
# on 25% of the training data used for validation"; the authors' examples stop early on val_mse). Without
# it, full-batch joint training overfits the 376 Actuator windows: val NLL 27.8 after 1000 steps, -0.08 at best.
BEST_BY = "val_rmse"
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


def is_gp(name: str) -> bool:
    return name.startswith("gp_")


def kind_of(name: str) -> str:
    return name.removeprefix("gp_")


# ----- checks ------------------------------------------------------------------------------------------
def validate(cfg) -> None:
    m, t = cfg.model, cfg.trainer
    name = m.name
    C.gaussian_only(cfg, f"model={name} is a regression model on sequences: use likelihood=gaussian")
    _check_dataset(cfg)
    net = m.network
    for key in ("layers", "units"):
        if not C.is_int(net[key]) or net[key] < 1:
            raise param_error(key, f"model={name} (network)", "an integer >= 1", net[key])
    for key in ("dropout", "rec_dropout"):
        v = net.get(key, 0.0)
        if not C.is_number(v) or not 0 <= v < 1:
            raise param_error(key, f"model={name} (network)", "a float in [0, 1)", v)
    if net.get("dtype", "float32") not in ("float32", "float64"):
        raise param_error("dtype", f"model={name} (network)", "'float32' or 'float64'", net.dtype)
    hz = m.get("horizons") or []
    if any(not C.is_int(h) or h < 1 for h in hz):
        raise param_error("horizons", f"model={name}", "a list of integers >= 1", list(hz))
    if not is_gp(name):
        return
    g = m.gp
    if not C.is_int(net.embed_dim) or net.embed_dim < 1:
        raise param_error("embed_dim", f"model={name} (network)", "an integer >= 1", net.embed_dim)
    if g.inference not in ("exact", "kiss"):
        raise param_error("inference", f"model={name} (gp)", "'exact' or 'kiss'", g.inference)
    if g.inference == "kiss" and net.embed_dim > 3:
        raise UnsupportedCombination(
            f"model.gp.inference=kiss interpolates on a grid of grid_size^embed_dim points: it needs "
            f"model.network.embed_dim <= 3 (the paper uses 1-2); got embed_dim={net.embed_dim}"
        )
    if not C.is_int(g.grid_size) or g.grid_size < 8:
        raise param_error("grid_size", f"model={name} (gp)", "an integer >= 8", g.grid_size)
    if not C.is_number(g.grid_margin) or g.grid_margin < 0:
        raise param_error("grid_margin", f"model={name} (gp)", "a float >= 0", g.grid_margin)
    if not C.is_number(g.noise_floor) or g.noise_floor <= 0:
        raise param_error("noise_floor", f"model={name} (gp)", "a float in (0, inf)", g.noise_floor)
    if not C.is_int(g.max_exact) or g.max_exact < 1:
        raise param_error("max_exact", f"model={name} (gp)", "an integer >= 1", g.max_exact)
    dense_below = g.get("kiss_dense_below", 2000)
    if not C.is_int(dense_below) or dense_below < 0:
        raise param_error("kiss_dense_below", f"model={name} (gp)", "an integer >= 0", dense_below)
    if m.init not in ("random", "pretrained"):
        raise param_error("init", f"model={name}", "'random' or 'pretrained'", m.init)
    if not C.is_int(m.pretrain_epochs) or m.pretrain_epochs < 1:
        raise param_error("pretrain_epochs", f"model={name}", "an integer >= 1", m.pretrain_epochs)
    algorithm = t.get("algorithm", "full")
    if algorithm not in ALGORITHMS:
        raise param_error("algorithm", "trainer", f"one of {', '.join(ALGORITHMS)}", algorithm)
    tau = t.get("kernel_refresh_every")
    if tau is not None and (not C.is_int(tau) or tau < 1):
        raise param_error("kernel_refresh_every", "trainer", "an integer >= 1 or null (one epoch)", tau)
    if algorithm == "alternating" and tau not in (None, 1):
        raise UnsupportedCombination(
            f"trainer.algorithm=alternating (Algorithm 1) refreshes the kernel after every minibatch; "
            f"trainer.kernel_refresh_every={tau} is trainer.algorithm=delayed (Algorithm 2)"
        )
    for key in ("lr_over_tau", "refresh_check"):
        if not isinstance(t.get(key, True), bool):
            raise param_error(key, "trainer", "true or false", t.get(key))
    for key, default in (("theta_steps", 10), ("final_theta_steps", 100)):
        v = t.get(key, default)
        if not C.is_int(v) or v < 0:
            raise param_error(key, "trainer", "an integer >= 0", v)
    if t.get("optimizer", "adam") == "lbfgs" and algorithm != "full":
        raise UnsupportedCombination(
            f"trainer.optimizer=lbfgs needs a deterministic objective; "
            f"trainer.algorithm={algorithm} takes stochastic minibatch steps"
        )


def _check_dataset(cfg) -> None:
    from ..data.registry import get_dataset_info

    d, name = cfg.dataset, cfg.model.name
    info = get_dataset_info(d.name)
    if info.task != "sequence":
        from ..data.registry import all_datasets

        seq = [n for n, i in all_datasets().items() if i.task == "sequence"]
        raise UnsupportedCombination(
            f"model={name} maps windows of a time series: it needs a sequence dataset ({', '.join(seq)}); "
            f"dataset={d.name} is a {info.task} dataset"
        )
    mode = d.get("mode")
    if mode is not None and mode not in MODES:
        raise param_error("mode", f"dataset={d.name}", f"one of {', '.join(MODES)}", mode)
    lag = d.get("lag")
    if lag is not None and (not C.is_int(lag) or lag < 1):
        raise param_error("lag", f"dataset={d.name}", "an integer >= 1", lag)


def check_sizes(cfg, n_train: int) -> None:
    m = cfg.model
    if is_gp(m.name) and m.gp.inference == "exact" and n_train > m.gp.max_exact:
        raise UnsupportedCombination(
            f"model={m.name} with model.gp.inference=exact refuses n_train={n_train} > model.gp.max_exact="
            f"{m.gp.max_exact} (O(N^3) per kernel refresh); use model.gp.inference=kiss or fewer windows "
            f"(dataset.split.train_size, dataset.stride)"
        )


# ----- hooks -----------------------------------------------------------------------------------------
class EpochTimer:
    """Time per epoch of a stage, evaluation excluded (the trainer's own accounting)."""

    def __init__(self):
        self.seconds_per_epoch = None

    def stage_end(self, result) -> None:
        if result.epochs > 0:
            self.seconds_per_epoch = result.train_seconds / result.epochs


@contextlib.contextmanager
def _probes(seed: int | None):
    """KISS: fix the stochastic-Lanczos probe vectors (gpytorch draws them from torch's global
    generator) so one refresh's NLML and cotangents are one deterministic function."""
    if seed is None:
        yield
        return
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        yield


class KernelRefresh:
    """Algorithm 2's kernel refresh every ``tau`` W steps (see the module docstring)."""

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
        from ..objectives.recurrent import refresh_cotangents
        from ..training import make_optimizer

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
        self.h_prev, self.last = None, None
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
        with _probes(seed), torch.no_grad():
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
        with _probes(seed):
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


class _Pretrainer(torch.nn.Module):
    """The matching network baseline for ``init=pretrained``: the GP's network body (shared, so
    its trained recurrent layers are kept) plus its own linear head, trained with MSE."""

    def __init__(self, network, num_outputs: int):
        super().__init__()
        self.network = network
        self.head = torch.nn.Linear(network.head.in_features, num_outputs).to(network.dtype)

    def forward(self, x, *, train=False, generator=None):
        return self.head(self.network.hidden(x, train=train, generator=generator))


# ----- evaluation --------------------------------------------------------------------------------------
class _Precomputed:
    """``marginals`` from precomputed (mu, var), indexed by the row number stored in x[:, 0]: lets
    the standard ``predictive_metrics`` score predictions made elsewhere (rollouts, several outputs)."""

    def __init__(self, mu, var):
        self.mu, self.var = mu, var

    def marginals(self, idx):
        i = idx[:, 0].long()
        return self.mu[i], self.var[i]


def scored(mu, var, y, likelihoods, y_std, prefix: str) -> dict[str, float]:
    """The standard predictive metrics (target units, log s_y) of every output, pooled: ``nll``
    and ``nll_norm`` are means over outputs, ``mse`` a mean and ``rmse`` its root; the calibration
    metrics (coverage, its error, CRPS, MSLL) are means over outputs."""
    from ..metrics import predictive_metrics

    y = y[:, None] if y.ndim == 1 else y
    d = y.shape[1]
    stds = [float(y_std)] * d if not hasattr(y_std, "__len__") else [float(s) for s in y_std]
    idx = torch.arange(y.shape[0], dtype=mu.dtype, device=mu.device)[:, None]
    per = [
        predictive_metrics(
            _Precomputed(mu[:, k], var[:, k]), likelihoods[k], idx, y[:, k].to(mu.dtype), y_std=stds[k], prefix=""
        )
        for k in range(d)
    ]
    mean = {key: sum(p[key] for p in per) / d for key in per[0]}
    mse_norm = sum(p["rmse_norm"] ** 2 for p in per) / d
    out = {
        prefix + "nll": mean["nll"],
        prefix + "nll_norm": mean["nll_norm"],
        prefix + "mse": mean["mse"],
        prefix + "rmse": math.sqrt(mean["mse"]),
        prefix + "rmse_norm": math.sqrt(mse_norm),
    }
    out.update({prefix + k: mean[k] for k in CALIBRATION if k in mean})
    return out


CALIBRATION = ("msll", "crps", "coverage_50", "coverage_90", "coverage_95", "coverage_error")


@torch.no_grad()
def simulate(predict, x: torch.Tensor, feedback: list[list[tuple[int, int]]]) -> tuple[torch.Tensor, torch.Tensor]:
    """Free simulation over time-ordered windows ``x`` (one row per step): before predicting row
    j, every past-target column (col, rows back r) with j - r >= 0 is overwritten by the predictive
    mean of row j - r; the first row keeps its L true past targets. ``predict(rows) -> (mu, var)``
    of shape (rows, d). Returns the rollout's (mu, var), (n, d)."""
    x = x.clone()
    n, d = x.shape[0], len(feedback)
    mus = x.new_zeros(n, d)
    vs = x.new_zeros(n, d)
    for j in range(n):
        for o, taps in enumerate(feedback):
            cols = [c for c, r in taps if j - r >= 0]
            if cols:
                x[j, cols] = mus[[j - r for c, r in taps if j - r >= 0], o].to(x.dtype)
        m, v = predict(x[j : j + 1])
        mus[j], vs[j] = m[0], v[0]
    return mus, vs


@torch.no_grad()
def rollouts(predict, x: torch.Tensor, feedback: list[list[tuple[int, int]]], steps: int) -> torch.Tensor:
    """k-step-ahead predictions from every start: trajectory s starts at window s from the true past
    targets and runs ``steps`` steps of free simulation (as :func:`simulate`), all trajectories in
    one batch per step. Returns the predictive means (n, steps, d); entry [s, i] predicts window
    s + i (NaN past the end)."""
    n, d = x.shape[0], len(feedback)
    out = torch.full((n, steps, d), float("nan"), dtype=x.dtype, device=x.device)
    for i in range(steps):
        s = torch.arange(n - i, device=x.device)  # trajectories that still have a window to predict
        rows = x[s + i].clone()
        for o, taps in enumerate(feedback):
            for col, back in taps:
                if back <= i:  # that past target was predicted by the same trajectory
                    rows[:, col] = out[s, i - back, o].to(x.dtype)
        mu, _ = predict(rows)
        out[s, i] = mu.to(x.dtype)
    return out


def simulation_metrics(mu, var, y, likelihoods, y_std, prefix: str, horizons, ahead=None) -> dict[str, float]:
    """Free-simulation metrics, in target units: ``sim_rmse`` and ``sim_nll`` over the whole trajectory
    started at the first window (the paper's free simulation; the NLL from the GP's own one-step
    variances, no propagated uncertainty); ``sim_rmse_h<k>``, the RMSE over the first k simulated
    steps, pooled over every start whose k steps lie inside the split (``ahead``: :func:`rollouts`).
    h1 is the one-step RMSE; pooling over starts makes the curve a property of the model rather
    than of where one trajectory happens to start."""
    out = {
        k.replace(prefix, prefix + "sim_", 1): v
        for k, v in scored(mu, var, y, likelihoods, y_std, prefix).items()
        if k.endswith(("rmse", "nll"))
    }
    y2 = y[:, None] if y.ndim == 1 else y
    n = y2.shape[0]
    stds = torch.as_tensor(np.atleast_1d(np.asarray(y_std, dtype=float)), dtype=y2.dtype, device=y2.device)
    for h in horizons:
        if ahead is not None and h <= ahead.shape[1] and h <= n:
            starts = torch.arange(n - h + 1, device=y2.device)
            truth = y2[starts[:, None] + torch.arange(h, device=y2.device)[None, :]]  # (starts, h, d)
            err = (ahead[: n - h + 1, :h] - truth) * stds
            out[f"{prefix}sim_rmse_h{h}"] = float(err.pow(2).mean().sqrt())
    return out


# ----- build -----------------------------------------------------------------------------------------
def build(cfg, data, task: str) -> Method:
    from ..features.recurrent import FeatureMap, WindowLayout
    from ..likelihoods import GaussianLikelihood
    from ..models.deep_kernel import KISS_DENSE_BELOW, DeepKernelGP, NetworkRegressor
    from ..objectives.recurrent import CotangentSurrogate, DeepKernelNLML, FixedEmbeddingNLML, SquaredError

    m, t = cfg.model, cfg.trainer
    name, kind, gp = m.name, kind_of(m.name), is_gp(m.name)
    x, y = data.x_train, data.y_train
    n, D = x.shape
    device = x.device
    check_sizes(cfg, n)
    d = 1 if y.ndim == 1 else y.shape[1]
    targets = list(data.target_names or ["y"])
    try:
        layout = WindowLayout.from_names(list(data.feature_names or []), targets)
    except ValueError as e:
        raise DataError(f"dataset={cfg.dataset.name} does not hold windows a recurrent model can read: {e}") from None
    mode = cfg.dataset.get("mode") or ("autoregression" if any(layout.feedback) else "regression")
    stride = int(cfg.dataset.get("stride") or 1)
    feedback = [[(c, k // stride) for c, k in taps] for taps in layout.feedback]
    if mode == "free_simulation":
        if not all(layout.feedback):
            raise UnsupportedCombination(
                f"dataset.mode=free_simulation needs the past targets in every window; "
                f"dataset={cfg.dataset.name} has none for some output"
            )
        past_only = [
            c for c in layout.channels if c not in targets and f"{c}[t-0]" not in (data.feature_names or [])
        ]  # past values of series not predicted
        if past_only:
            raise UnsupportedCombination(
                f"dataset.mode=free_simulation feeds back only the predicted outputs ({', '.join(targets)}), but the "
                f"windows of dataset={cfg.dataset.name} also hold past values of {len(past_only)} other series "
                f"({', '.join(past_only[:3])}{', ...' if len(past_only) > 3 else ''}) that would stay ground truth "
                f"during the rollout (teacher forcing); predict and feed back every output (dataset.output=all) "
                f"or use dataset.mode=autoregression"
            )
        if any(k % stride for taps in layout.feedback for _, k in taps):
            raise UnsupportedCombination(
                f"free simulation feeds predictions back one window per step: every past-target tap t-k needs "
                f"k to be a multiple of dataset.stride={stride}"
            )

    net = m.network
    net_dtype = torch.float32 if net.get("dtype", "float32") == "float32" else torch.float64
    dropout, rec_dropout = float(net.get("dropout", 0.0)), float(net.get("rec_dropout", 0.0))
    stochastic_net = dropout > 0 or rec_dropout > 0
    out_dim = net.embed_dim if gp else d
    with torch.random.fork_rng(devices=[]):  # seeded initialisation, the global generator untouched
        torch.manual_seed(cfg.seed)
        network = FeatureMap(
            kind,
            layout,
            D,
            units=net.units,
            layers=net.layers,
            out_dim=out_dim,
            dropout=dropout,
            rec_dropout=rec_dropout,
        )
        pretrainer = _Pretrainer(network, d) if gp and m.init == "pretrained" else None
    network = network.to(device=device, dtype=net_dtype)
    if pretrainer is not None:
        pretrainer = pretrainer.to(device=device, dtype=net_dtype)
    masks = torch.Generator(device=device).manual_seed(cfg.seed + 1)  # dropout masks
    lr = {} if t.lr is not None else {"lr": _DEFAULT_LR}
    base_lr = float(t.lr) if t.lr is not None else _DEFAULT_LR
    horizons = [int(h) for h in (m.get("horizons") or [])]
    timer = EpochTimer()
    last = {"test_ms_per_point": float("nan")}

    if gp:
        g = m.gp
        likelihoods = [
            GaussianLikelihood(
                noise_init=max(float(cfg.likelihood.noise_init), 1.01 * g.noise_floor), noise_min=float(g.noise_floor)
            )
            for _ in range(d)
        ]
        kernels = [_base_kernel(cfg, net.embed_dim, g.ard) for _ in range(d)]
        model = DeepKernelGP(
            network,
            kernels,
            likelihoods,
            inference=g.inference,
            grid_size=g.grid_size,
            grid_margin=float(g.grid_margin),
            kiss_dense_below=int(g.get("kiss_dense_below", KISS_DENSE_BELOW)),
        ).to(device)
        for gp_ in model.gps:
            gp_.covar_module.outputscale = float(cfg.kernel.outputscale)
    else:
        likelihoods = [GaussianLikelihood(noise_init=float(cfg.likelihood.noise_init)) for _ in range(d)]
        model = NetworkRegressor(network, likelihoods).to(device)
        model.likelihoods.to(torch.float64)  # the predictive noise, like every GP quantity, in float64
    groups = model.groups()

    def condition():
        if gp:
            model.condition(x, y)
            return
        with torch.no_grad():  # the baseline's predictive noise: its mean squared training residual
            resid = model.predict(x).to(y.dtype) - (y[:, None] if y.ndim == 1 else y)
            for k, lik in enumerate(likelihoods):
                lik.gp.noise = resid[:, k].pow(2).mean().clamp_min(1e-8)

    def evaluate(xe, ye, prefix, y_std):
        if xe.shape[0] == 0:
            return {}
        condition()
        t0 = time.perf_counter()
        mu, var = model.marginals_all(xe)
        if prefix == "test_":
            last["test_ms_per_point"] = 1000 * (time.perf_counter() - t0) / xe.shape[0]
        out = scored(mu, var, ye, likelihoods, y_std, prefix)
        if mode == "free_simulation":
            smu, svar = simulate(model.marginals_all, xe, feedback)
            reach = min(max(horizons, default=0), xe.shape[0])
            ahead = rollouts(model.marginals_all, xe, feedback, reach) if reach else None
            out.update(simulation_metrics(smu, svar, ye, likelihoods, y_std, prefix, horizons, ahead))
        return out

    def predict(xe):
        """(mu, var) of the latent outputs (n, d) at time-ordered windows ``xe``: one-step predictions,
        or in free simulation the rollout from the L true past targets of ``xe``'s first window."""
        condition()
        if mode == "free_simulation":
            return simulate(model.marginals_all, xe, feedback)
        return model.marginals_all(xe)

    names = ["nll", "nll_norm", "mse", "rmse", "rmse_norm", *CALIBRATION]
    if mode == "free_simulation":
        names += ["sim_rmse", "sim_nll"] + [f"sim_rmse_h{h}" for h in horizons]
    tags = {"gpdlm.prediction_mode": mode}
    if mode == "free_simulation":
        tags["gpdlm.free_simulation"] = (
            "teacher forcing in training; rollout feeds back the predictive mean from L true targets"
        )

    if not gp:
        stage = Stage(
            "mse",
            SquaredError(model.predict, dropout=stochastic_net, generator=masks),
            groups,
            stochastic=stochastic_net,
            hooks=[timer],
            overrides=lr,
        )

        def diagnostics():
            return {
                "epoch_seconds": _nan(timer.seconds_per_epoch),
                "test_ms_per_point": last["test_ms_per_point"],
                **series_statistics(cfg),
            }

        return Method(
            name,
            model,
            likelihoods[0],
            [stage],
            evaluate=evaluate,
            evaluation_metrics=tuple(names),
            diagnostics=diagnostics,
            tags=tags,
            default_keep_best=BEST_BY,
            predict=predict,
        )

    # ----- GP models: pre-training, the algorithm, final theta steps ------------------------------------
    kiss = m.gp.inference == "kiss"
    noisy_gp = not model.is_dense(n)  # KISS on the structured operator: stochastic Lanczos estimates
    algorithm = t.get("algorithm", "full")
    scales = {"kernel": 1.0, "likelihood": 1.0, **{str(k): float(v) for k, v in (t.get("lr_scale") or {}).items()}}
    stages = []
    if pretrainer is not None:
        body = [p for layer in network.body for p in layer.parameters()] + list(pretrainer.head.parameters())
        stages.append(
            Stage(
                "pretrain",
                SquaredError(pretrainer, dropout=stochastic_net, generator=masks),
                {"network": body},
                stochastic=True,
                overrides={**lr, "max_epochs": int(m.pretrain_epochs), "max_iters": None},
            )
        )
    refresh = None
    if algorithm == "full":
        objective = DeepKernelNLML(model, n, dropout=stochastic_net, generator=masks)
        stages.append(
            Stage(
                "full",
                objective,
                groups,
                stochastic=stochastic_net or noisy_gp,
                hooks=[timer],
                overrides={**lr, "batch_size": None},
            )
        )
    else:
        bs = t.batch_size if t.batch_size and t.batch_size < n else None
        steps_per_epoch = n // bs if bs else 1
        tau = 1 if algorithm == "alternating" else int(t.get("kernel_refresh_every") or steps_per_epoch)
        surrogate = CotangentSurrogate(model, n)
        refresh = KernelRefresh(
            model,
            surrogate,
            x,
            y,
            tau=tau,
            theta_steps=int(t.get("theta_steps", 10)),
            theta_lr={k: base_lr * scales[k] for k in ("kernel", "likelihood")},
            check=bool(t.get("refresh_check", True)),
            probe_seed=cfg.seed if kiss else None,
            masks=masks if stochastic_net else None,
        )
        lr_scale = {"network": 1.0 / tau} if t.get("lr_over_tau", True) else {}
        stages.append(
            Stage(
                algorithm,
                surrogate,
                {"network": groups["network"]},
                prepare=refresh.refresh,
                stochastic=True,
                hooks=[timer, refresh],
                lr_scale=lr_scale,
                overrides=lr,
                wants_index=True,
            )
        )
    final_steps = int(t.get("final_theta_steps", 100))
    if final_steps > 0:
        theta = FixedEmbeddingNLML(model, n)

        def fix_embedding():
            with torch.no_grad():
                theta.set_embedding(model.embed(x))

        stages.append(
            Stage(
                "theta",
                theta,
                {"kernel": groups["kernel"], "likelihood": groups["likelihood"]},
                prepare=fix_embedding,
                stochastic=noisy_gp,
                overrides={
                    **lr,
                    "batch_size": None,
                    "max_iters": final_steps,
                    "max_epochs": None,
                    "eval_every_epochs": None,
                },
            )
        )  # one step is one "epoch" here

    @torch.no_grad()
    def train_nlml() -> float:
        with _probes(cfg.seed if kiss else None):
            h = model.embed(x)
            model.fit_grid(h)
            return float(model.nlml(h, y) / n)

    monitors = {"train_nlml": train_nlml}
    if refresh is not None:
        monitors["embedding_drift"] = lambda: refresh.drift

    def diagnostics():
        out = {
            "epoch_seconds": _nan(timer.seconds_per_epoch),
            "test_ms_per_point": last["test_ms_per_point"],
            "noise": float(torch.stack([lik.noise.detach().mean() for lik in likelihoods]).mean()),
            "outputscale": float(
                torch.stack([gp_.covar_module.outputscale.detach().mean() for gp_ in model.gps]).mean()
            ),
        }
        out.update(series_statistics(cfg))
        if refresh is not None:
            out.update(
                {
                    "refreshes": refresh.refreshes,
                    "lr_halvings": refresh.halvings,
                    "lr_restores": refresh.restores,
                    "lr_w_factor": 0.5**refresh.guard.level,
                    "embedding_drift_mean": statistics.fmean(refresh.drifts) if refresh.drifts else float("nan"),
                }
            )
        return out

    tags.update({"gpdlm.algorithm": algorithm, "gpdlm.inference": m.gp.inference, "gpdlm.init": m.init})
    if kiss:
        tags["gpdlm.kiss_evaluation"] = (
            f"structured: CG + stochastic Lanczos, pivoted-Cholesky preconditioner, probes seeded per refresh "
            f"(n_train={n} >= model.gp.kiss_dense_below={model.kiss_dense_below})"
            if noisy_gp
            else f"dense: W K_UU W^T formed and factorised by Cholesky (n_train={n} < model.gp.kiss_dense_below="
            f"{model.kiss_dense_below})"
        )
    return Method(
        name,
        model,
        likelihoods[0],
        stages,
        monitors=monitors,
        evaluate=evaluate,
        evaluation_metrics=tuple(names),
        diagnostics=diagnostics,
        tags=tags,
        default_keep_best=BEST_BY,
        predict=predict,
    )


def _nan(v):
    return float("nan") if v is None else float(v)


def series_statistics(cfg) -> dict[str, float]:
    """sysid datasets: Table 1's statistics of the series this run trained and tested on,
    ``data_abs_corr`` and ``data_snr``: on the real ``actuator`` / ``drives`` their first
    ``dataset.n`` steps (``data.sequences.real_sysid_statistics``); on the generators the series of
    the run's own generator seed, ``dataset.seed``, which follows ``seed`` by default
    (``data.sequences.sysid_statistics``); other datasets: none."""
    from ..data.registry import get_dataset_info
    from ..data.sequences import real_sysid_statistics, sysid_statistics

    if cfg.dataset.name in ("actuator", "drives"):
        stats = real_sysid_statistics(get_dataset_info(cfg.dataset.name), cfg.dataset.get("n"))
        return {"data_abs_corr": stats["abs_corr"], "data_snr": stats["snr"]}
    system = {"sysid_actuator": "actuator", "sysid_drives": "drives"}.get(cfg.dataset.name)
    if system is None:
        return {}
    stats = sysid_statistics(system, cfg.dataset.get("n"), int(cfg.dataset.get("seed", 0)))
    return {"data_abs_corr": stats["abs_corr"], "data_snr": stats["snr"]}


def _base_kernel(cfg, embed_dim: int, ard: bool):
    """The stationary base kernel of ``kernel.name`` on the embedding (ARD if ``model.gp.ard``),
    with ``kernel.lengthscale`` as its initial lengthscale."""
    import gpytorch

    k = cfg.kernel
    dims = embed_dim if ard else None
    if k.name == "rbf":
        base = gpytorch.kernels.RBFKernel(ard_num_dims=dims)
    elif k.name in ("matern12", "matern32", "matern52"):
        base = gpytorch.kernels.MaternKernel(
            nu={"matern12": 0.5, "matern32": 1.5, "matern52": 2.5}[k.name], ard_num_dims=dims
        )
    else:
        raise param_error("name", "kernel", f"one of {', '.join(C.STATIONARY_KERNELS)}", k.name)
    if not C.is_number(k.lengthscale) or k.lengthscale <= 0:
        raise param_error("lengthscale", f"kernel={k.name}", "a float in (0, inf)", k.lengthscale)
    base.lengthscale = k.lengthscale
    return base
