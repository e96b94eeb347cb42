"""The recurrent family (Al-Shedivat et al., "Learning scalable deep kernels with recurrent
structure", JMLR 2017): GPs with recurrent deep kernels -- GP-LSTM, GP-GRU, GP-RNN, GP-NARX --
and the network baselines LSTM, GRU, RNN, NARX trained with MSE on the same windows.

A GP model is k(phi_W(x_bar), phi_W(x_bar')) on windows x_bar of a sequence dataset
(``gpdlm_cli.models.deep_kernel``); its training protocol (``model.training.algorithm``; every protocol key is ``model.training.*``):

* ``full``: joint full-batch descent of NLML(W, theta)/N (Wilson et al. 2016a);
* ``delayed``: Algorithm 2 (Sec. 4.1), semi-stochastic with delayed kernel updates, in its unbiased
  cotangent form (``objectives.recurrent.CotangentSurrogate``). Every tau = ``kernel_refresh_every``
  minibatch steps (null: one epoch) a refresh embeds all training windows, checks whether the NLML
  rose during the stale steps by more than the rises' own minibatch noise (then lr_W is halved, at
  most 4 times net, and restored once the rises are calm: :class:`RefreshGuard`;
  ``refresh_check``; both NLMLs on the same probe vectors for structured KISS, and under the
  same dropout masks), runs
  ``theta_steps`` full-data steps on the kernel hyperparameters and noise, and recomputes the
  cotangents; the W steps in between use lr_W = lr / tau (``lr_over_tau``, Theorem 2's
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

from dataclasses import dataclass
from typing import Any

import torch

from ..exceptions import UnsupportedCombination
from ..schema import ModelSpec, RunSpec, as_run_spec
from ..schema.keys import choice, flag, integer, listing, nested, real
from . import components as C
from .base import Method, Stage
from .recurrent_setup import (
    DEFAULT_LR,
    GPStages,
    OwnFeedback,
    build_baseline,
    build_gp,
    build_network,
    feedback_taps,
    is_gp,
    kiss_tag,
    nan_or,
    window_layout,
)

MODELS = ("gp_lstm", "gp_gru", "gp_rnn", "gp_narx", "lstm", "gru", "rnn", "narx")
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (sweep/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = {m: True for m in ("gp_lstm", "gp_gru", "gp_rnn", "gp_narx")}
MULTI_OUTPUT = True  # independent GPs (or linear outputs) sharing one network
TAKES_FEATURES = False  # the network is the model's own (model.network), not `features=`
#: model.training.algorithm's choices (Algorithms 1-2 of the paper, and joint full-batch descent)
ALGORITHMS = ("full", "alternating", "delayed")
#: model.training.feedback's choices: teacher forcing, or the model's own rollout (free simulation only)
FEEDBACK = ("true_targets", "own_predictions")
#: model.training.feedback_conditioning's choices: what a GP trained on its own rollouts conditions on to predict
FEEDBACK_CONDITIONING = ("rollouts", "true_targets")
# trainer.keep_best=auto: the iterate with the lowest validation RMSE (App. E: "best models were selected
# on 25% of the training data used for validation"; the authors' examples stop early on val_mse). Without
# it, full-batch joint training overfits the 376 Actuator windows: val NLL 27.8 after 1000 steps, -0.08 at best.
BEST_BY = "val_rmse"


# ----- keys ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NetworkSpec:
    """``model.network``: the recurrent network phi_W (App. E, Table 4)."""

    layers: int = integer(1, lo=1, help="recurrent (or MLP) layers")
    units: int = integer(16, lo=1, help="hidden units per layer")
    dropout: float = real(0.0, lo=0, hi=1, hi_open=True, help="input dropout and dropout after the last hidden layer")
    rec_dropout: float = real(0.0, lo=0, hi=1, hi_open=True, help="recurrent dropout, one mask per sequence")
    embed_dim: int = integer(2, lo=1, help="GP models: E, the GP's input dimension")
    dtype: str = choice(
        "float32",
        ("float32", "float64"),
        allowed="'float32' or 'float64'",
        help="the network's dtype (the GP algebra is float64)",
    )


@dataclass(frozen=True)
class GPSpec:
    """``model.gp``: the deep-kernel GP on the embedding (GP models only)."""

    inference: str = choice(
        "exact",
        ("exact", "kiss"),
        allowed="'exact' or 'kiss'",
        help="exact (dense Cholesky) | kiss (KISS-GP grid; embed_dim <= 3)",
    )
    grid_size: int = integer(100, lo=8, help="kiss: grid points per embedding dimension")
    grid_margin: float = real(
        0.1, lo=0, allowed="a float >= 0", help="kiss: the grid covers the embedding's range +- this fraction"
    )
    ard: bool = flag(True, help="one lengthscale per embedding dimension")
    noise_floor: float = real(
        1e-3, lo=0, lo_open=True, allowed="a float in (0, inf)", help="lower bound of the noise variance"
    )
    max_exact: int = integer(5000, lo=1, help="exact inference refuses more training windows")
    kiss_dense_below: int = integer(2000, lo=0, help="kiss: fewer training windows are evaluated densely")


@dataclass(frozen=True)
class TrainingSpec:
    """``model.training``: the training protocol. All but ``feedback`` and ``feedback_conditioning`` are the GP
    models' (Sec. 4.1; ``trainer.*`` before config-hash version 3: ``tracking.identity.PROTOCOL_KEYS`` lists them),
    which the baselines ignore; ``feedback`` is every recurrent model's, ``feedback_conditioning`` a GP model's with
    ``feedback=own_predictions`` (both ``tracking.identity.ADDED_KEYS``)."""

    algorithm: str = choice("full", ALGORITHMS, help="full | alternating (Algorithm 1) | delayed (Algorithm 2)")
    kernel_refresh_every: int | None = integer(
        None, lo=1, null="one epoch", help="delayed: W minibatch steps between kernel refreshes (tau)"
    )
    theta_steps: int = integer(10, lo=0, help="alternating/delayed: kernel + noise steps at every refresh")
    final_theta_steps: int = integer(100, lo=0, help="kernel + noise steps after training with W fixed (0 = none)")
    lr_over_tau: bool = flag(True, help="alternating/delayed: the network's lr is trainer.lr / tau (Theorem 2)")
    refresh_check: bool = flag(
        True, help="alternating/delayed: halve the network's lr when the NLML rose during stale steps"
    )
    feedback: str = choice(
        "true_targets",
        FEEDBACK,
        help="free simulation: what the training windows' past-target columns hold (own_predictions: the "
        "model's own rollout over the training series, rewritten every epoch)",
    )
    feedback_conditioning: str = choice(
        "rollouts",
        FEEDBACK_CONDITIONING,
        help="GP models with feedback=own_predictions: the windows the GP conditions on to predict (rollouts: the "
        "fed-back training windows; true_targets: the true-target windows, while W and theta train on the rollouts)",
    )


def _horizons_ok(hz) -> bool:
    return all(isinstance(h, int) and not isinstance(h, bool) and h >= 1 for h in hz)


@dataclass(frozen=True)
class Spec(ModelSpec):
    """``model=gp_lstm|gp_gru|gp_rnn|gp_narx|lstm|gru|rnn|narx``'s keys."""

    network: NetworkSpec = nested(NetworkSpec, "network", help="the network phi_W")
    gp: GPSpec = nested(GPSpec, "gp", help="the GP on the embedding (GP models)")
    training: TrainingSpec = nested(TrainingSpec, "training", help="the GP models' training protocol")
    init: str = choice(
        "random",
        ("random", "pretrained"),
        allowed="'random' or 'pretrained'",
        help="pretrained: train the baseline with MSE first, keep its layers",
    )
    pretrain_epochs: int = integer(50, lo=1, help="init=pretrained: epochs of the baseline's MSE training")
    simulate_in_training: bool = flag(
        False, help="true: every training evaluation also simulates (else only where a sim_ metric selects)"
    )
    horizons: list = listing(
        [],
        test=_horizons_ok,
        allowed="a list of integers >= 1",
        help="free simulation: RMSE over the first k simulated steps",
    )


# ----- checks ------------------------------------------------------------------------------------------
def validate(spec: RunSpec) -> None:
    """The combinations of the family's keys (their ranges: ``Spec``, ``schema.TrainerSpec``)."""
    spec = as_run_spec(spec, Spec)
    m, t = spec.model, spec.trainer
    name = m.name
    C.gaussian_only(spec, f"model={name} is a regression model on sequences: use likelihood=gaussian")
    _check_dataset(spec)
    mode = spec.dataset.extra.get("mode")
    if m.training.feedback == "own_predictions" and mode != "free_simulation":
        raise UnsupportedCombination(
            f"model.training.feedback=own_predictions trains on the model's own free-simulation rollouts: it needs "
            f"dataset.mode=free_simulation (got dataset.mode={mode or 'the dataset default'})"
        )
    conditioning = m.training.feedback_conditioning
    if conditioning != "rollouts" and (not is_gp(name) or m.training.feedback != "own_predictions"):
        raise UnsupportedCombination(
            f"model.training.feedback_conditioning={conditioning} chooses the windows a GP model trained on its own "
            f"rollouts conditions on: it needs a GP model and model.training.feedback=own_predictions (got "
            f"model={name}, model.training.feedback={m.training.feedback})"
        )
    if not is_gp(name):
        return
    if m.gp.inference == "kiss" and m.network.embed_dim > 3:
        raise UnsupportedCombination(
            f"model.gp.inference=kiss interpolates on a grid of grid_size^embed_dim points: it needs "
            f"model.network.embed_dim <= 3 (the paper uses 1-2); got embed_dim={m.network.embed_dim}"
        )
    algorithm, tau = m.training.algorithm, m.training.kernel_refresh_every
    if algorithm == "alternating" and tau not in (None, 1):
        raise UnsupportedCombination(
            f"model.training.algorithm=alternating (Algorithm 1) refreshes the kernel after every minibatch; "
            f"model.training.kernel_refresh_every={tau} is model.training.algorithm=delayed (Algorithm 2)"
        )
    if t.optimizer == "lbfgs" and algorithm != "full":
        raise UnsupportedCombination(
            f"trainer.optimizer=lbfgs needs a deterministic objective; "
            f"model.training.algorithm={algorithm} takes stochastic minibatch steps"
        )


def _check_dataset(spec: RunSpec) -> None:
    from ..data.sequence_datasets import check_sequence_dataset

    d = spec.dataset
    check_sequence_dataset(d.name, f"model={spec.model.name}")  # its options: the schema (schema.options)


def check_sizes(spec: RunSpec, n_train: int) -> None:
    m = as_run_spec(spec, Spec).model
    if is_gp(m.name) and m.gp.inference == "exact" and n_train > m.gp.max_exact:
        raise UnsupportedCombination(
            f"model={m.name} with model.gp.inference=exact refuses n_train={n_train} > model.gp.max_exact="
            f"{m.gp.max_exact} (O(N^3) per kernel refresh); use model.gp.inference=kiss or fewer windows "
            f"(dataset.split.train_size, dataset.stride)"
        )


# ----- build -----------------------------------------------------------------------------------------
def build(spec: RunSpec, data, task: str) -> Method:
    """The Method of a recurrent model: the network (and GP) of ``spec.model`` on the windows of ``data``,
    its training stages, evaluation (one-step and, in free simulation, rollouts) and diagnostics."""
    from ..metrics.simulation import EvaluationSchedule, SequenceEvaluation
    from ..objectives.recurrent import SquaredError
    from ..training.kernel_refresh import EpochTimer, GeneratorState

    spec = as_run_spec(spec, Spec)
    m, t = spec.model, spec.trainer
    x, y = data.x_train, data.y_train
    n, num_inputs = x.shape
    check_sizes(spec, n)
    d = 1 if y.ndim == 1 else y.shape[1]
    layout = window_layout(data, spec.dataset.name)
    mode = spec.dataset.extra.get("mode") or ("autoregression" if any(layout.feedback) else "regression")
    feedback = feedback_taps(layout, data, mode, int(spec.dataset.extra.get("stride") or 1), spec.dataset.name)
    network, pretrainer = build_network(m, layout, num_inputs, d, spec.seed, x.device)
    masks = torch.Generator(device=x.device).manual_seed(spec.seed + 1)  # dropout masks
    lr = {} if t.lr is not None else {"lr": DEFAULT_LR}
    timer = EpochTimer()
    gp = is_gp(m.name)
    model, likelihoods = (build_gp if gp else build_baseline)(spec, network, d, x.device)
    own = _own_feedback(m.training, model, x, y, feedback)
    x_cond = x if own is None else own.conditioning  # the windows the model conditions on to predict
    evaluation = SequenceEvaluation(
        model,
        x_cond,
        y,
        likelihoods,
        mode=mode,
        feedback=feedback,
        horizons=[int(h) for h in m.horizons],
        simulate_in_training=_simulate_in_training(m, t),
    )
    schedule = EvaluationSchedule(evaluation)  # training evaluations: one-step metrics (the selection's)
    tags = {"gpdlm.prediction_mode": mode}
    if mode == "free_simulation":
        tags["gpdlm.free_simulation"] = _free_simulation_tag(own)
    common: dict[str, Any] = {  # the Method keywords both variants share
        "evaluate": evaluation.evaluate,
        "evaluation_metrics": evaluation.metric_names(),
        "tags": tags,
        "default_keep_best": BEST_BY,
        "predict": evaluation.predict,
    }

    def timing() -> dict[str, float]:
        out = {"epoch_seconds": nan_or(timer.seconds_per_epoch), "test_ms_per_point": evaluation.test_ms_per_point}
        return out if own is None else {**out, **own.diagnostics()}

    if not gp:
        stochastic = network.stochastic
        objective = SquaredError(model.predict, dropout=stochastic, generator=masks)
        hooks = [timer, schedule, GeneratorState(masks)]  # the masks' generator through a checkpoint
        stage = Stage("mse", objective, model.groups(), stochastic=stochastic, hooks=hooks, overrides=lr)
        if own is not None:
            own.attach(stage, t.batch_size)
        return Method(
            m.name, model, likelihoods[0], [stage], diagnostics=lambda: {**timing(), **_statistics(spec)}, **common
        )

    parts = GPStages(spec, model, pretrainer, x, y, lr=lr, masks=masks, timer=timer)
    for stage in parts.stages:  # the dropout masks' generator through a checkpoint
        stage.hooks = [*stage.hooks, schedule, GeneratorState(masks)]
    if own is not None:
        own.attach(parts.main, t.batch_size)
    tags.update({"gpdlm.algorithm": m.training.algorithm, "gpdlm.inference": m.gp.inference, "gpdlm.init": m.init})
    if m.gp.inference == "kiss":
        tags["gpdlm.kiss_evaluation"] = kiss_tag(model, n)

    def diagnostics() -> dict[str, float]:
        return {**timing(), **parts.hyperparameters(), **_statistics(spec), **parts.refresh_counts()}

    return Method(
        m.name, model, likelihoods[0], parts.stages, monitors=parts.monitors(), diagnostics=diagnostics, **common
    )


def _own_feedback(training: TrainingSpec, model, x, y, feedback) -> OwnFeedback | None:
    """``model.training.feedback=own_predictions``'s hook (None for teacher forcing): it rewrites the training
    windows ``x`` in place; the model conditions on them to predict, or with ``feedback_conditioning=true_targets``
    on a copy of the true-target windows taken here, before any rollout."""
    if training.feedback != "own_predictions":
        return None
    conditioning = x.clone() if training.feedback_conditioning == "true_targets" else None
    return OwnFeedback(model, x, y, feedback, conditioning=conditioning)


def _free_simulation_tag(own: OwnFeedback | None) -> str:
    """The run's tag ``gpdlm.free_simulation``: how it was trained and what its GP conditions on."""
    if own is None:
        return "teacher forcing in training; rollout feeds back the predictive mean from L true targets"
    return (
        "trained on its own rollout over the training series (rewritten every epoch); rollout feeds back the "
        "predictive mean from L true targets"
        + ("" if own.conditioning is own.x else "; the GP conditions on the true-target windows")
    )


def _simulate_in_training(m, t) -> str:
    """Which splits training evaluations simulate: ``all`` with ``model.simulate_in_training=true`` (every
    evaluation complete), ``val`` when the best iterate is selected by a simulated metric, else ``none``."""
    if m.simulate_in_training:
        return "all"
    keep = t.keep_best
    return "val" if "sim_" in str(BEST_BY if keep == "auto" else keep) else "none"


def _statistics(spec: RunSpec) -> dict[str, float]:
    """sysid datasets: Table 1's statistics of the run's own series (``data.sequence_datasets``)."""
    from ..data.sequence_datasets import series_statistics

    d = spec.dataset
    return series_statistics(d.name, d.extra.get("n"), int(d.extra.get("seed", 0)))
