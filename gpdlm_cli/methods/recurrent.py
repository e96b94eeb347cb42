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

import torch

from ..data.sequences import MODES
from ..exceptions import UnsupportedCombination, param_error
from . import components as C
from .base import Method, Stage
from .recurrent_setup import (
    DEFAULT_LR,
    GPStages,
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
# trainer.keep_best=auto: the iterate with the lowest validation RMSE (App. E: "best models were selected
# on 25% of the training data used for validation"; the authors' examples stop early on val_mse). Without
# it, full-batch joint training overfits the 376 Actuator windows: val NLL 27.8 after 1000 steps, -0.08 at best.
BEST_BY = "val_rmse"


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
    from ..data.sequence_datasets import check_sequence_dataset

    d = cfg.dataset
    check_sequence_dataset(d.name, f"model={cfg.model.name}")
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


# ----- build -----------------------------------------------------------------------------------------
def build(cfg, data, task: str) -> Method:
    """The Method of a recurrent model: the network (and GP) of ``cfg.model`` on the windows of ``data``,
    its training stages, evaluation (one-step and, in free simulation, rollouts) and diagnostics."""
    from ..metrics.simulation import SequenceEvaluation
    from ..objectives.recurrent import SquaredError
    from ..training.kernel_refresh import EpochTimer

    m, t = cfg.model, cfg.trainer
    x, y = data.x_train, data.y_train
    n, num_inputs = x.shape
    check_sizes(cfg, n)
    d = 1 if y.ndim == 1 else y.shape[1]
    layout = window_layout(data, cfg.dataset.name)
    mode = cfg.dataset.get("mode") or ("autoregression" if any(layout.feedback) else "regression")
    feedback = feedback_taps(layout, data, mode, int(cfg.dataset.get("stride") or 1), cfg.dataset.name)
    network, pretrainer = build_network(m, layout, num_inputs, d, cfg.seed, x.device)
    masks = torch.Generator(device=x.device).manual_seed(cfg.seed + 1)  # dropout masks
    lr = {} if t.lr is not None else {"lr": DEFAULT_LR}
    timer = EpochTimer()
    gp = is_gp(m.name)
    model, likelihoods = (build_gp if gp else build_baseline)(cfg, network, d, x.device)
    evaluation = SequenceEvaluation(
        model, x, y, likelihoods, mode=mode, feedback=feedback, horizons=[int(h) for h in (m.get("horizons") or [])]
    )
    tags = {"gpdlm.prediction_mode": mode}
    if mode == "free_simulation":
        tags["gpdlm.free_simulation"] = (
            "teacher forcing in training; rollout feeds back the predictive mean from L true targets"
        )
    common = {
        "evaluate": evaluation.evaluate,
        "evaluation_metrics": evaluation.metric_names(),
        "tags": tags,
        "default_keep_best": BEST_BY,
        "predict": evaluation.predict,
    }

    def timing() -> dict[str, float]:
        return {"epoch_seconds": nan_or(timer.seconds_per_epoch), "test_ms_per_point": evaluation.test_ms_per_point}

    if not gp:
        stochastic = network.stochastic
        objective = SquaredError(model.predict, dropout=stochastic, generator=masks)
        stage = Stage("mse", objective, model.groups(), stochastic=stochastic, hooks=[timer], overrides=lr)
        return Method(
            m.name, model, likelihoods[0], [stage], diagnostics=lambda: {**timing(), **_statistics(cfg)}, **common
        )

    parts = GPStages(cfg, model, pretrainer, x, y, lr=lr, masks=masks, timer=timer)
    tags.update(
        {"gpdlm.algorithm": t.get("algorithm", "full"), "gpdlm.inference": m.gp.inference, "gpdlm.init": m.init}
    )
    if m.gp.inference == "kiss":
        tags["gpdlm.kiss_evaluation"] = kiss_tag(model, n)

    def diagnostics() -> dict[str, float]:
        return {**timing(), **parts.hyperparameters(), **_statistics(cfg), **parts.refresh_counts()}

    return Method(
        m.name, model, likelihoods[0], parts.stages, monitors=parts.monitors(), diagnostics=diagnostics, **common
    )


def _statistics(cfg) -> dict[str, float]:
    """sysid datasets: Table 1's statistics of the run's own series (``data.sequence_datasets``)."""
    from ..data.sequence_datasets import series_statistics

    d = cfg.dataset
    return series_statistics(d.name, d.get("n"), int(d.get("seed", 0)))
