"""The parts the recurrent family (``methods.recurrent``) builds a run from: the window layout and the
free-simulation feedback taps, the network, the deep-kernel GP with its KISS setup, the GP models'
training stages (pre-training, Algorithm 1/2 or joint descent, final theta steps) and their
diagnostics. Not a family (no ``MODELS``): the family module composes these."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

import torch

from ..exceptions import DataError, UnsupportedCombination, param_error
from ..schema import RunSpec
from . import components as C
from .base import Stage

if TYPE_CHECKING:
    from ..training.kernel_refresh import KernelRefresh

DEFAULT_LR = 0.01  # Adam(0.01): App. E, Table 4


def is_gp(name: str) -> bool:
    return name.startswith("gp_")


def kind_of(name: str) -> str:
    return name.removeprefix("gp_")


def nan_or(v) -> float:
    return float("nan") if v is None else float(v)


# ----- windows -----------------------------------------------------------------------------------------
def window_layout(data, dataset: str):
    """The ``features.recurrent.WindowLayout`` of the windows in ``data`` (a one-line DataError when
    its feature names are not windows)."""
    from ..features.recurrent import WindowLayout

    try:
        return WindowLayout.from_names(list(data.feature_names or []), list(data.target_names or ["y"]))
    except ValueError as e:
        raise DataError(f"dataset={dataset} does not hold windows a recurrent model can read: {e}") from None


def feedback_taps(layout, data, mode: str, stride: int, dataset: str) -> list[list[tuple[int, int]]]:
    """Per output, its past-target columns and how many windows back each lies (``stride``: windows kept
    every ``stride`` steps); in free simulation, refuse windows a rollout cannot feed back."""
    targets = list(data.target_names or ["y"])
    feedback = [[(c, k // stride) for c, k in taps] for taps in layout.feedback]
    if mode != "free_simulation":
        return feedback
    if not all(layout.feedback):
        raise UnsupportedCombination(
            f"dataset.mode=free_simulation needs the past targets in every window; dataset={dataset} has none for "
            f"some output"
        )
    past_only = [
        c for c in layout.channels if c not in targets and f"{c}[t-0]" not in (data.feature_names or [])
    ]  # past values of series not predicted
    if past_only:
        raise UnsupportedCombination(
            f"dataset.mode=free_simulation feeds back only the predicted outputs ({', '.join(targets)}), but the "
            f"windows of dataset={dataset} also hold past values of {len(past_only)} other series "
            f"({', '.join(past_only[:3])}{', ...' if len(past_only) > 3 else ''}) that would stay ground truth "
            f"during the rollout (teacher forcing); predict and feed back every output (dataset.output=all) "
            f"or use dataset.mode=autoregression"
        )
    if any(k % stride for taps in layout.feedback for _, k in taps):
        raise UnsupportedCombination(
            f"free simulation feeds predictions back one window per step: every past-target tap t-k needs "
            f"k to be a multiple of dataset.stride={stride}"
        )
    return feedback


# ----- networks and models ------------------------------------------------------------------------------
def build_network(m, layout, num_inputs: int, num_outputs: int, seed: int, device):
    """The network phi_W of model config ``m`` (``m.network``; seeded by ``seed``, the global generator
    untouched) and, for ``init=pretrained`` GPs, its ``Pretrainer``; both on ``device`` in the network's
    dtype. A GP's network ends in ``embed_dim`` outputs, a baseline's in ``num_outputs``."""
    from ..features.recurrent import FeatureMap
    from ..models.deep_kernel import Pretrainer

    net, gp = m.network, is_gp(m.name)
    net_dtype = torch.float32 if net.dtype == "float32" else torch.float64
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        network = FeatureMap(
            kind_of(m.name),
            layout,
            num_inputs,
            units=net.units,
            layers=net.layers,
            out_dim=net.embed_dim if gp else num_outputs,
            dropout=float(net.dropout),
            rec_dropout=float(net.rec_dropout),
        )
        pretrainer = Pretrainer(network, num_outputs) if gp and m.init == "pretrained" else None
    network = network.to(device=device, dtype=net_dtype)
    if pretrainer is not None:
        pretrainer = pretrainer.to(device=device, dtype=net_dtype)
    return network, pretrainer


def build_gp(spec: RunSpec, network, num_outputs: int, device):
    """The KISS/exact setup: a ``DeepKernelGP`` on ``network`` with one base kernel (``kernel``, ARD if
    ``model.gp.ard``, outputscale ``kernel.outputscale``) and one Gaussian likelihood (noise floored at
    ``model.gp.noise_floor``) per output; KISS on a ``grid_size``^E grid refitted at every refresh."""
    from ..likelihoods import GaussianLikelihood
    from ..models.deep_kernel import DeepKernelGP

    g, embed_dim = spec.model.gp, spec.model.network.embed_dim
    if spec.kernel.name not in C.STATIONARY_KERNELS:
        raise param_error("name", "kernel", f"one of {', '.join(C.STATIONARY_KERNELS)}", spec.kernel.name)
    noise = max(float(spec.likelihood.options.get("noise_init", 0.1)), 1.01 * g.noise_floor)
    likelihoods = [GaussianLikelihood(noise_init=noise, noise_min=float(g.noise_floor)) for _ in range(num_outputs)]
    kernels = [C.build_base_kernel(spec.kernel, embed_dim, ard=g.ard) for _ in range(num_outputs)]
    model = DeepKernelGP(
        network,
        kernels,
        likelihoods,
        inference=g.inference,
        grid_size=g.grid_size,
        grid_margin=float(g.grid_margin),
        kiss_dense_below=int(g.kiss_dense_below),
    ).to(device)
    for gp_ in model.gps:
        gp_.covar_module.outputscale = float(spec.kernel.outputscale)  # type: ignore[union-attr]
    return model, likelihoods


def build_baseline(spec: RunSpec, network, num_outputs: int, device):
    """A network baseline (``NetworkRegressor``) with float64 predictive noises."""
    from ..likelihoods import GaussianLikelihood
    from ..models.deep_kernel import NetworkRegressor

    likelihoods = [
        GaussianLikelihood(noise_init=float(spec.likelihood.options.get("noise_init", 0.1))) for _ in range(num_outputs)
    ]
    model = NetworkRegressor(network, likelihoods).to(device)
    model.likelihoods.to(torch.float64)  # the predictive noise, like every GP quantity, in float64
    return model, likelihoods


def kiss_tag(model, n: int) -> str:
    """How a KISS model with ``n`` training windows is evaluated (the run's ``gpdlm.kiss_evaluation``)."""
    if not model.is_dense(n):
        return (
            f"structured: CG + stochastic Lanczos, pivoted-Cholesky preconditioner, probes seeded per refresh "
            f"(n_train={n} >= model.gp.kiss_dense_below={model.kiss_dense_below})"
        )
    return (
        f"dense: W K_UU W^T formed and factorised by Cholesky (n_train={n} < model.gp.kiss_dense_below="
        f"{model.kiss_dense_below})"
    )


# ----- the GP models' stages ------------------------------------------------------------------------------
class GPStages:
    """The stages of a GP model (pre-training, then ``model.training.algorithm``, then final theta steps) and the
    ``KernelRefresh`` of Algorithms 1-2 (``refresh``; None for ``full``); ``main``: the
    ``model.training.algorithm`` stage. ``lr``: the trainer overrides
    that set the family's default learning rate; ``masks``: the dropout-mask generator."""

    def __init__(self, spec: RunSpec, model, pretrainer, x, y, *, lr: dict, masks, timer):
        self.spec, self.model, self.x, self.y = spec, model, x, y
        self.n = x.shape[0]
        self.lr, self.masks, self.timer = lr, masks, timer
        self.stochastic_net = model.network.stochastic
        self.noisy_gp = not model.is_dense(self.n)  # KISS on the structured operator: stochastic Lanczos
        self.refresh: KernelRefresh | None = None
        self.stages = [] if pretrainer is None else [self._pretrain(pretrainer)]
        algorithm = spec.model.training.algorithm
        self.main = self._full() if algorithm == "full" else self._semi_stochastic(algorithm)
        self.stages.append(self.main)
        final_steps = int(spec.model.training.final_theta_steps)
        if final_steps > 0:
            self.stages.append(self._theta(final_steps))

    def _pretrain(self, pretrainer) -> Stage:
        from ..objectives.recurrent import SquaredError

        body = [p for layer in self.model.network.body for p in layer.parameters()] + list(pretrainer.head.parameters())
        overrides = {**self.lr, "max_epochs": int(self.spec.model.pretrain_epochs), "max_iters": None}
        objective = SquaredError(pretrainer, dropout=self.stochastic_net, generator=self.masks)
        return Stage("pretrain", objective, {"network": body}, stochastic=True, overrides=overrides)

    def _full(self) -> Stage:
        from ..objectives.recurrent import DeepKernelNLML

        objective = DeepKernelNLML(self.model, self.n, dropout=self.stochastic_net, generator=self.masks)
        return Stage(
            "full",
            objective,
            self.model.groups(),
            stochastic=self.stochastic_net or self.noisy_gp,
            hooks=[self.timer],
            overrides={**self.lr, "batch_size": None},
        )

    def _semi_stochastic(self, algorithm: str) -> Stage:
        from ..objectives.recurrent import CotangentSurrogate
        from ..training.kernel_refresh import KernelRefresh

        t, protocol, n = self.spec.trainer, self.spec.model.training, self.n
        bs = t.batch_size if t.batch_size and t.batch_size < n else None
        steps_per_epoch = n // bs if bs else 1
        tau = 1 if algorithm == "alternating" else int(protocol.kernel_refresh_every or steps_per_epoch)
        base_lr = float(t.lr) if t.lr is not None else DEFAULT_LR
        scales = {"kernel": 1.0, "likelihood": 1.0, **{str(k): float(v) for k, v in t.scales.items()}}
        surrogate = CotangentSurrogate(self.model, n)
        self.refresh = KernelRefresh(
            self.model,
            surrogate,
            self.x,
            self.y,
            tau=tau,
            theta_steps=int(protocol.theta_steps),
            theta_lr={k: base_lr * scales[k] for k in ("kernel", "likelihood")},
            check=bool(protocol.refresh_check),
            probe_seed=self.spec.seed if self.model.inference == "kiss" else None,
            masks=self.masks if self.stochastic_net else None,
        )
        return Stage(
            algorithm,
            surrogate,
            {"network": self.model.groups()["network"]},
            prepare=self.refresh.refresh,
            stochastic=True,
            hooks=[self.timer, self.refresh],
            lr_scale={"network": 1.0 / tau} if protocol.lr_over_tau else {},
            overrides=self.lr,
            wants_index=True,
        )

    def _theta(self, final_steps: int) -> Stage:
        from ..objectives.recurrent import FixedEmbeddingNLML

        model, x = self.model, self.x
        theta = FixedEmbeddingNLML(model, self.n)

        def fix_embedding():
            with torch.no_grad():
                theta.set_embedding(model.embed(x))

        groups = model.groups()
        return Stage(
            "theta",
            theta,
            {"kernel": groups["kernel"], "likelihood": groups["likelihood"]},
            prepare=fix_embedding,
            hooks=[FixedEmbedding(theta)],
            stochastic=self.noisy_gp,
            keep_start=True,  # keep_best's selected iterate stays unless the refit improves the selection metric
            overrides={
                **self.lr,
                "batch_size": None,
                "max_iters": final_steps,
                "max_epochs": None,
                "eval_every_epochs": None,
            },
        )  # one step is one "epoch" here

    @torch.no_grad()
    def train_nlml(self) -> float:
        """NLML/N of the training windows at the current W and theta (KISS: the run's probe vectors)."""
        from ..training.kernel_refresh import fixed_probes

        model = self.model
        with fixed_probes(self.spec.seed if model.inference == "kiss" else None):
            h = model.embed(self.x)
            model.fit_grid(h)
            return float(model.nlml(h, self.y) / self.n)

    def monitors(self) -> dict:
        out = {"train_nlml": self.train_nlml}
        refresh = self.refresh
        if refresh is not None:
            out["embedding_drift"] = lambda: refresh.drift
        return out

    def hyperparameters(self) -> dict[str, float]:
        """Noise and outputscale, means over outputs."""
        model = self.model
        return {
            "noise": float(torch.stack([lik.noise.detach().mean() for lik in model.likelihoods]).mean()),
            "outputscale": float(
                torch.stack([gp_.covar_module.outputscale.detach().mean() for gp_ in model.gps]).mean()
            ),
        }

    def refresh_counts(self) -> dict[str, float]:
        """The refresh's counts (Algorithms 1-2; none for ``full``)."""
        refresh = self.refresh
        if refresh is None:
            return {}
        return {
            "refreshes": refresh.refreshes,
            "lr_halvings": refresh.halvings,
            "lr_restores": refresh.restores,
            "lr_w_factor": 0.5**refresh.guard.level,
            "embedding_drift_mean": statistics.fmean(refresh.drifts) if refresh.drifts else float("nan"),
        }


class FixedEmbedding:
    """The final theta stage's hook: its fixed embedding through a checkpoint. (The stage's ``prepare`` computes
    it before a resumed run's tensors are restored, from the untrained network: the checkpoint's copy wins.)"""

    def __init__(self, objective):
        self.objective = objective  # objectives.recurrent.FixedEmbeddingNLML

    def checkpoint_state(self) -> dict:
        return {"h": self.objective.h}

    def load_checkpoint_state(self, state: dict) -> None:
        if state["h"] is not None:
            self.objective.set_embedding(state["h"].to(self.objective.model.network.head.weight.device))


# ----- training on the model's own rollouts ---------------------------------------------------------------
class OwnFeedback:
    """``model.training.feedback=own_predictions`` (free simulation; Sec. 5.2.2: "the model learns to map
    past inputs and its own past predictions to a future target"), gpdlm's reading: a DAgger-like
    "simulation-error" protocol. At the start of the main training stage (:meth:`prepare`, before
    Algorithm 2's first refresh) and after the last step of every epoch (:meth:`after_step`,
    before the kernel refresh and the evaluation falling there; a stage hook placed before the refresh),
    the current model is rolled out over the time-ordered training windows ``x`` from the true past targets
    of the first (``metrics.simulation.simulated_windows``: the free simulation's loop, predictive means fed
    back, no gradient through the rollout), and the fed-back windows are written into ``x`` in place: the
    tensor the trainer draws its batches from, the kernel refresh embeds and (by default) the GP conditions on.
    The targets stay the true ones. A GP rolls out with its predictive mean conditioned (``condition``, at the
    current W and theta) on ``conditioning``: by default the windows it trained on so far.

    ``x`` is registered as the buffer ``feedback_windows`` of ``model``, so keep_best's snapshot, a checkpoint
    and a saved model keep the windows their iterate was trained and evaluated with (``gpdlm predict``
    conditions a GP on them). ``steps_per_epoch``: the stage's minibatch steps per epoch (:meth:`attach`);
    ``seconds``, ``rollouts``: the time spent rolling out and how many rollouts were made.

    ``conditioning``: the windows the model conditions on to predict -- ``x`` itself (the default), or
    (``model.training.feedback_conditioning=true_targets``, GP models) a separate tensor holding the true-target
    windows, registered as the buffer ``conditioning_windows``; then the rollout, like every evaluation, uses the
    GP conditioned on them, while the batches, the kernel refresh and the theta steps use ``x``."""

    def __init__(self, model, x, y, feedback, conditioning=None):
        self.model, self.x, self.y, self.feedback = model, x, y, feedback
        self.conditioning = x if conditioning is None else conditioning
        self.steps_per_epoch = 1
        self.seconds, self.rollouts = 0.0, 0
        model.register_buffer("feedback_windows", x)
        if self.conditioning is not x:
            model.register_buffer("conditioning_windows", self.conditioning)

    @torch.no_grad()
    def rollout(self) -> None:
        """Roll the current model out over the training windows and write its windows into ``x``."""
        import time

        from ..metrics.simulation import simulated_windows

        t0 = time.perf_counter()
        self.model.condition(self.conditioning, self.y)
        self.x.copy_(simulated_windows(self.model.means, self.x, self.feedback))
        self.seconds += time.perf_counter() - t0
        self.rollouts += 1

    def attach(self, stage, batch_size: int | None) -> None:
        """Make ``stage`` (the main training stage, trained with minibatches of ``batch_size`` unless its
        overrides say otherwise) roll out first and after every epoch."""
        bs = stage.overrides.get("batch_size", batch_size)
        n = self.x.shape[0]
        self.steps_per_epoch = n // bs if bs and bs < n else 1
        stage.prepare = self.prepare(stage.prepare)
        stage.hooks.insert(0, self)  # before Algorithm 2's refresh: it refreshes on the new windows

    def prepare(self, then=None):
        """A stage's ``prepare``: the first rollout, then ``then()`` (Algorithm 2's first refresh)."""

        def run() -> None:
            self.rollout()
            if then is not None:
                then()

        return run

    def after_step(self, iteration: int, epoch: int) -> None:
        if iteration % self.steps_per_epoch == 0:
            self.rollout()

    def checkpoint_state(self) -> dict:
        return {"rollouts": self.rollouts, "seconds": self.seconds}  # the windows: the model's buffer

    def load_checkpoint_state(self, state: dict) -> None:
        self.rollouts, self.seconds = int(state["rollouts"]), float(state["seconds"])

    def diagnostics(self) -> dict[str, float]:
        """``feedback_rollouts`` and ``feedback_rollout_seconds`` (the mean time of one rollout)."""
        return {
            "feedback_rollouts": float(self.rollouts),
            "feedback_rollout_seconds": self.seconds / self.rollouts if self.rollouts else float("nan"),
        }
