"""What a model family hands to the trainer: a ``Method`` made of ``Stage`` s.

A family module (``methods/<family>.py``) turns a composed config and the data into a ``Method``:
the model (anything with ``marginals(x) -> (mu, var)``), its likelihood, and the training protocol
as a list of stages. The trainer (``gpdlm_cli.training``) runs the stages; families only declare
them. Protocols such as SVGP-then-DLM, pre-train-then-fine-tune or refresh-then-minibatch-steps are
all lists of stages with named parameter groups, per-stage trainer overrides and hooks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch


@dataclass
class Stage:
    """One step of a training protocol.

    Either iterate ``objective(x_batch, y_batch)`` (a scalar to *minimise*) over the parameters in
    ``groups`` -- named parameter groups, each trained with ``trainer.lr * trainer.lr_scale[<name>]``
    -- or call ``solve(x, y)`` for a closed-form step. ``prepare()`` runs first in both cases.

    * ``stochastic``: the objective's value or gradient is a random estimate even on the full
      batch (a sampling estimator); the trainer then uses the stopping rule for noisy losses and
      refuses L-BFGS. Minibatch training is stochastic whatever this says.
    * ``hooks``: objects with optional methods the trainer calls: ``bind_optimizer(optimizer)`` once
      with the stage's optimiser (a hook may change its groups' ``lr`` and ``base_lr``, e.g. halve
      lr_W when a refresh finds the NLML went up), ``epoch_start(epoch)``, ``after_step(iteration,
      epoch)`` (SCGD's running-average refresh, Algorithm 2's kernel refresh), ``before_evaluate()``
      and ``training_end()`` (before evaluations and before the stage's final one: the collapsed
      ELBO's q(u) update), and ``stage_end(result)`` with the stage's ``TrainResult`` (e.g. time per epoch).
    * ``overrides``: trainer settings for this stage only (e.g. ``{"batch_size": None}``).
    * ``lr_scale``: the family's default learning-rate multipliers per group (``trainer.lr_scale``
      overrides them group by group).
    * ``wants_index``: call ``objective(x_batch, y_batch, index)`` with the batch's row indices
      (``None`` on the full batch).
    * ``lbfgs_ok``: the fast protocol (``trainer=fast``) may train this stage with L-BFGS when it is
      deterministic and full batch (the family vouches that its objective is a smooth deterministic
      function of the groups' parameters: closed-form or quadrature DLM, the ELBOs, SGPR/FITC, exact,
      SSGP); stages that leave it False keep the configured first-order optimiser.
    * ``shareable``: the stage's result does not depend on ``objective.beta`` (the fixed variants'
      SVGP stage): a sweep trains it once per everything else and reuses it (``training.reuse``).
    * ``blocks``: a fixed partition of the training rows (1-D index tensors on the data's device)
      to use instead of shuffled minibatches: each epoch visits every block once, in a random order,
      so a step's block is uniform over the blocks (e.g. the sparse-spectrum paper's k-means
      blocks, Theorem 1). ``trainer.batch_size`` is then unused.
    * ``keep_start``: with ``trainer.keep_best``, the stage's starting point competes with its final
      iterate on the selection metric (one evaluation before its first step), and the better one is
      kept: a refinement stage after a selected iterate (the recurrent family's final theta steps)
      cannot silently replace the selected model by one that is worse on the selection metric.
    """

    name: str
    objective: Any = None
    groups: dict[str, list] = field(default_factory=dict)
    prepare: Callable[[], None] | None = None
    solve: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    stochastic: bool = False
    hooks: list = field(default_factory=list)
    overrides: dict = field(default_factory=dict)
    lr_scale: dict[str, float] = field(default_factory=dict)
    wants_index: bool = False
    blocks: list | None = None
    lbfgs_ok: bool = False
    shareable: bool = False
    keep_start: bool = False

    @property
    def params(self) -> list:
        """All parameters of all groups, each once, in group order."""
        seen, out = set(), []
        for ps in self.groups.values():
            for p in ps:
                if id(p) not in seen:
                    seen.add(id(p))
                    out.append(p)
        return out


@dataclass
class Method:
    """What ``gpdlm train`` runs.

    * ``model``: has ``marginals(x) -> (mu, var)`` of the latent f (the protocol every objective,
      estimator and metric relies on; see ``gpdlm_cli.models``), ``likelihood`` its likelihood;
    * ``stages``: the training protocol; ``estimator``: the injected log-expectation estimator, if any;
    * ``finalize(x, y)``: completes the predictive distribution after training (square-loss DLM's noise);
    * ``monitors``: family metrics computed at every evaluation point and at the end, by name
      (e.g. the full-data NLML of the RKHS family); ``trainer.keep_best`` may name them;
      ``higher_is_better`` lists the ones to maximise;
    * ``watch``: monitors whose worsening over the second half of a run earns a warning and the tag
      ``gpdlm.warning.<name>`` (``run.watch``; e.g. sVBSSGP's ELBO per datum);
    * ``default_keep_best``: the metric ``trainer.keep_best=auto`` (the default) selects the iterate
      by, where the family's paper selects one (validation RMSE for the recurrent models, the
      full-data NLML for the RKHS family); None = end on the last iterate;
    * ``evaluate(x, y, prefix, y_std) -> dict``: the family's own predictive metrics, for families
      that predict in their own way (gamma family, free simulation); None = the standard
      ``metrics.predictive_metrics`` of ``model``/``likelihood``; ``evaluation_metrics`` names what
      it reports (without the val_/test_ prefix; None = the standard names of the task);
    * ``diagnostics() -> dict``: extra final metrics (e.g. learned outputscale);
    * ``tags``: strings recorded as MLflow tags (e.g. which ELBO form was used);
    * ``predict(x) -> (mu, var)``: latent predictive means and variances (n, d), standardised units,
      for families whose ``model.marginals`` is not how they predict (the recurrent family: one-step,
      or the free-simulation rollout from the first window); used by ``gpdlm predict``.
    """

    name: str
    model: Any
    likelihood: Any
    stages: list[Stage]
    estimator: Any = None
    finalize: Callable[[torch.Tensor, torch.Tensor], None] | None = None
    monitors: dict[str, Callable[[], float]] = field(default_factory=dict)
    higher_is_better: frozenset = frozenset()
    watch: tuple[str, ...] = ()
    default_keep_best: str | None = None
    evaluate: Callable[..., dict] | None = None
    evaluation_metrics: tuple[str, ...] | None = None
    diagnostics: Callable[[], dict] | None = None
    tags: dict[str, str] = field(default_factory=dict)
    predict: Callable[[torch.Tensor], tuple[torch.Tensor, torch.Tensor]] | None = None

    @property
    def modules(self) -> list[torch.nn.Module]:
        """The modules whose state is the trained model (what ``keep_best`` snapshots)."""
        mods = [m for m in (self.model, self.likelihood) if isinstance(m, torch.nn.Module)]
        for stage in self.stages:
            if isinstance(stage.objective, torch.nn.Module) and all(stage.objective is not m for m in mods):
                mods.append(stage.objective)
        return mods

    @property
    def group_names(self) -> list[str]:
        names: list[str] = []
        for stage in self.stages:
            names += [g for g in stage.groups if g not in names]
        return names


class Family(Protocol):
    """A model family: a module ``gpdlm_cli/methods/<family>.py`` (a module satisfies this protocol
    structurally; the package finds it by itself, see ``methods.FAMILIES``).

    Required:

    * ``MODELS``: the ``model.name`` values it serves, one ``conf/model/<name>.yaml`` each;
    * ``validate(cfg)``: range checks and impossible combinations of its keys (no data);
    * ``build(cfg, data, task) -> Method``: the model, its likelihood and its training stages.

    Optional: ``check_sizes(cfg, n_train)`` (checks that need the training-set size), and the
    declarations in ``DECLARATIONS`` (read with ``methods.declaration``), each either one value for
    all of ``MODELS`` or a dict ``{model name: value}`` (models it leaves out get the default).
    """

    MODELS: tuple[str, ...]

    def validate(self, cfg) -> None: ...

    def build(self, cfg, data, task: str) -> Method: ...


#: the optional declarations of a family and their defaults
DECLARATIONS: dict[str, Any] = {
    # the validation metric `gpdlm select` (and a sweep's `sweep.objective=auto`) selects by; recorded
    # as the run tag gpdlm.selection_metric (square-loss DLM: val_mse)
    "SELECTION_METRIC": "val_nll",
    # a beta whose best run `gpdlm select` also reports as the row "<model> (beta=<b>)" (SVGP: the plain
    # ELBO at beta=1); the run tag gpdlm.reference_beta ("none" when not declared)
    "REFERENCE_BETA": None,
    # the values of model.variant (more than one: run names and reports show the variant)
    "VARIANTS": ("joint",),
    # whether the family puts `features=` (an input map, e.g. features=nn) in front of its kernel
    "TAKES_FEATURES": False,
    # whether it trains on several outputs (multi-output targets are refused otherwise)
    "MULTI_OUTPUT": False,
    # whether its predictions need the training data (a collapsed or exact posterior, feature-space
    # weights solved from the data, a recurrent GP's training windows): a saved model then rebuilds
    # from the run's fingerprinted data (run/saved_model.py)
    "PREDICTS_FROM_TRAINING_DATA": False,
    # whether model.num_inducing, when set, is its number of inducing points (run labels show M)
    "INDUCING_POINTS": True,
    # whether its training reads objective.beta (false: a sweep over beta repeats one run;
    # gpdlm's sweeper launches it once, sweep/beta_free.py)
    "USES_BETA": True,
    # a function of the model's config giving the model keys that make a timing probe's set-up cheap without
    # changing its training step (cells that serve predictions only), or None (sweep/plan.py's dry-run probes)
    "PROBE_MODEL_OVERRIDES": None,
}


def declared(family, key: str, model: str):
    """The declaration ``key`` of ``family`` for ``model`` (its default when not declared)."""
    default = DECLARATIONS[key]
    value = getattr(family, key, default)
    return value.get(model, default) if isinstance(value, dict) else value


__all__ = ["DECLARATIONS", "Family", "Method", "Stage", "declared"]
