"""``sweep.batched=true``: the jobs of a multirun that share one *shape* train as one batched model
(issue 21, item 4; the batched model is ``sweep.batched_model``).

A shape is everything in the config but ``seed`` and ``objective.beta`` (and the bookkeeping keys
``config_hash`` ignores): the seeds and betas of one model, dataset and training size. With the
basic launcher every job runs in this process, in order. The first job of a shape composes the
configs of all the sweep's jobs of its shape (the job list is in the sweep's context file,
``gpdlm_sweep.json``, written by ``sweep.callback.SweepCallback``), prepares each one as its own run
would (split, standardisation, k-means inducing inputs, initial hyperparameters), trains them
together, and leaves each member's end state, learning curves and fit summary in an in-process store
under its config hash. Every job -- the first included -- then takes its own member from the store
and goes on as a separate run does: the final evaluation, ``metrics.json``, MLflow child run,
saved model; its run carries the tag ``gpdlm.batched=<B>`` (the size of its batch).

The RKHS family (``methods.rkhs.batched_scope``; ``BATCHED_TRAINER = "stacked"``) batches on minibatches
with its own trainer, ``sweep.batched_rkhs``: its shapes are also free in ``trainer.lr`` and
``dataset.split.mask`` (``BATCHED_FREE_KEYS``), and each member keeps its own loop (batch order, hooks,
stopping, evaluations, best iterate) while the step's arithmetic is shared. So does minibatch SVGP with
AdaDelta on input features (the RKHS study's SVGP arm; ``methods.sparse_variational.batched_trainer``).

In scope for the sparse variational family (``methods.sparse_variational.batched_scope``): ``model=svgp`` (the
collapsed ELBO) and ``model=dlm`` (the closed-form Gaussian DLM; ``dlm_fixed``: each member's SVGP
stage is trained first as its own run trains it -- shared across betas by ``sweep.share_stages`` --
then the DLM stage of all members batched), ``likelihood=gaussian``, ``kernel=rbf``, zero mean, no features, the full
batch, ``trainer=paper`` with Adam and a constant learning rate, no ``keep_best``. Anything else --
or a batch that cannot be built or fails numerically -- is trained separately, job by job, exactly
as without ``sweep.batched``, with one line in the log and the tag ``gpdlm.batched=separate``.

A group checkpoints while it trains (``trainer.checkpoint_every``; under ``<sweep.cache_dir>/batched/``): the
full-batch group one file for the group (``batched_model.BatchCheckpoint``), the stacked group one file per
member (``batched_rkhs.GroupCheckpoint``). When the sweep is run again (``sweep.skip_finished``) the group formed
again continues from them (only then: without it a sweep trains everything again); they are removed once the
group has trained.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..tracking.identity import config_hash, config_hashes


@dataclass
class BatchedOutcome:
    """A job's share of its batch: ``fit`` (a ``training.FitResult``) and ``state`` (its modules'
    end state) when it was trained batched; ``fit`` None when it trains separately (``note`` says why)."""

    tag: str  # the value of the run tag gpdlm.batched: "<B>" or "separate"
    fit: object = None
    state: dict | None = None
    steps: dict = field(default_factory=dict)
    note: str | None = None
    restore: Callable | None = None  # restore(method): the member's state besides its tensors (hook states)
    continued: bool = False  # its group continued from checkpoints a stopped job of the sweep wrote


# (sweep folder, config hash) -> the job's outcome, filled by the first job of its shape, taken by the job itself
_STORE: dict[tuple[str, str], BatchedOutcome] = {}
_NOTED: set[tuple[str, str]] = set()  # (sweep folder, shape) whose fall-back note was printed
# sweep folder -> (its job list, [(config, config hash, shape key)]): composed once per sweep, not once per shape
# (the RKHS Tables 2/4 study: 1,440 jobs in 96 shapes)
_COMPOSED: dict[str, tuple[list, list]] = {}


def clear_batched() -> None:
    _STORE.clear()
    _NOTED.clear()
    _COMPOSED.clear()


def _composed(sweep: str, jobs: list) -> list:
    """The sweep's jobs composed, with their hashes and shapes (cached for the sweep's job list)."""
    cached = _COMPOSED.get(sweep)
    if cached is None or cached[0] != jobs:
        from .compose import compose_jobs

        cached = _COMPOSED[sweep] = (jobs, [(c, config_hash(c), shape_key(c)) for c in compose_jobs(jobs)])
    return cached[1]


def _family(cfg):
    from ..methods import REGISTRY

    return REGISTRY.get(cfg.model.name)


def _stacked(cfg) -> bool:
    """Whether the model's family trains its batches with its own loops in lockstep (``sweep.batched_rkhs``:
    minibatches, AdaDelta, keep_best, per-member learning rates) rather than the full-batch Adam model."""
    family = _family(cfg)
    pick = getattr(family, "batched_trainer", None)  # a family with both trainers picks one per config
    if pick is not None:
        return pick(cfg) == "stacked"
    return getattr(family, "BATCHED_TRAINER", None) == "stacked"


def shape_key(cfg) -> str:
    """The config hash without the keys a batch's members may differ in: ``seed`` and ``objective.beta``,
    and whatever more the family's ``BATCHED_FREE_KEYS`` names (the RKHS family: ``trainer.lr`` and
    ``dataset.split.mask``), or its ``STACKED_FREE_KEYS`` for a config it trains with the stacked trainer
    (minibatch SVGP with AdaDelta: the same two)."""
    family = _family(cfg)
    stacked = getattr(family, "STACKED_FREE_KEYS", ()) if _stacked(cfg) else ()
    free = ("seed", "objective.beta", *getattr(family, "BATCHED_FREE_KEYS", ()), *stacked)
    return config_hash(cfg, without=tuple(dict.fromkeys(free)))


def out_of_scope(cfg) -> str | None:
    """Why this config cannot be trained batched (one phrase), or None: the model's family says what
    it can batch (its ``batched_scope(cfg)``; none = nothing); the trainer must be Adam on the full
    batch with a constant rate (see the module docstring), except for a family with its own batched
    trainer (``BATCHED_TRAINER = "stacked"``: the RKHS family, whose scope names its trainer's limits)."""
    from ..methods import REGISTRY

    scope = getattr(REGISTRY.get(cfg.model.name), "batched_scope", None)
    if scope is None:
        return f"model={cfg.model.name} has no batched form"
    reason = scope(cfg)
    if reason is not None or _stacked(cfg):  # a stacked family's scope covers its trainer too
        return reason
    t = cfg.trainer
    if t.get("protocol", "paper") != "paper":
        return (
            f"trainer.protocol={t.protocol} uses L-BFGS, whose shared line search on the summed objective "
            "would couple the members: not batched"
        )
    if t.optimizer != "adam":
        return f"trainer.optimizer={t.optimizer} is not batched (Adam only)"
    if t.batch_size is not None:
        return "minibatches (trainer.batch_size) are not batched (full batch only)"
    if t.schedule != "constant":
        return f"trainer.schedule={t.schedule} is not batched (constant only)"
    if t.get("keep_best") not in (None, "auto", "none"):
        return "trainer.keep_best is not batched"
    if t.stop_rule not in ("auto", "window", "none"):
        return f"trainer.stop_rule={t.stop_rule} is not batched"
    return None


#: the sweep's context file, written by ``sweep.callback.SweepCallback`` (``SWEEP_FILE``)
SWEEP_CONTEXT = "gpdlm_sweep.json"


def _sweep_context(sweep_dir) -> dict:
    p = Path(sweep_dir) / SWEEP_CONTEXT
    try:
        return json.loads(p.read_text())
    except (OSError, ValueError):
        return {}


def _hydra():
    try:
        from hydra.core.hydra_config import HydraConfig
        from hydra.types import RunMode

        hc = HydraConfig.get()
    except Exception:  # not under Hydra (tests, API use): nothing to batch with
        return None
    return hc if hc.mode == RunMode.MULTIRUN else None


def batched_member(cfg, evaluator, tracker=None, stage_cache=None) -> BatchedOutcome | None:
    """This job's outcome under ``sweep.batched=true``: taken from the store (a member of a batch
    trained by an earlier job of its shape), trained now with the rest of its shape, or a note to
    train separately. None outside a multirun (a single run has nothing to batch with).
    ``evaluator(method, data, y_std)``: a run's evaluation (``run.train.evaluator``), for the
    members' intermediate evaluations; ``stage_cache(cfg)``: the run's ``StageCache`` (or None) for
    the stages before the batched one (the fixed variant's SVGP stage, shared across betas)."""
    hc = _hydra()
    if hc is None:
        return None
    sweep, key = str(hc.sweep.dir), config_hash(cfg)
    if (sweep, key) in _STORE:
        return _STORE.pop((sweep, key))
    reason = out_of_scope(cfg)
    if reason is not None:
        return _separate(sweep, cfg, reason)
    jobs = _sweep_context(hc.sweep.dir).get("jobs")
    if not jobs:
        return _separate(sweep, cfg, "the sweep's job list is unknown (gpdlm_sweep.json has none)")
    shape = shape_key(cfg)
    configs, seen = [], set()
    for c, k, c_shape in _composed(sweep, jobs):
        if c_shape != shape or (sweep, k) in _STORE or k in seen:
            continue
        if (
            k != key
            and cfg.sweep.get("skip_finished", False)
            and tracker is not None
            and tracker.skip_reason(config_hashes(c)) is not None
        ):
            continue  # its job will be skipped (done, or training in another process): no need to train it
        seen.add(k)
        configs.append(c)
    if key not in seen:
        return _separate(sweep, cfg, "this job is not in the sweep's job list")
    if len(configs) == 1:
        return _separate(
            sweep, cfg, "no other job of the sweep has this job's shape (only seed and objective.beta may differ)"
        )
    configs.sort(key=lambda c: config_hash(c) != key)  # this job's member first
    return _train_group(sweep, cfg, key, configs, evaluator, stage_cache)


def _separate(sweep: str, cfg, reason: str) -> BatchedOutcome:
    note = f"sweep.batched: {reason}; trained separately"
    shape = (sweep, shape_key(cfg))
    if shape not in _NOTED:
        _NOTED.add(shape)
        print(f"gpdlm: {note}", file=sys.stderr)
    return BatchedOutcome("separate", note=note)


def _train_group(sweep: str, cfg, key: str, configs: list, evaluator, stage_cache=None) -> BatchedOutcome:
    """Train the jobs of one shape together (the family's batched trainer: ``_svgp_group`` or
    ``sweep.batched_rkhs.train_group``), store each job's outcome; a group that cannot be batched is stored
    as separate jobs, with one line in the log."""
    from .batched_model import NotBatchable

    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):  # torch's global RNG: as this job left it (a separate run follows)
        try:
            if _stacked(cfg):
                from .batched_rkhs import train_group

                outcomes = {k: BatchedOutcome(**o) for k, o in train_group(cfg, key, configs, evaluator).items()}
            else:
                outcomes = _svgp_group(key, configs, evaluator, stage_cache)
        except NotBatchable as e:
            for c in configs:
                _STORE.setdefault(
                    (sweep, config_hash(c)), BatchedOutcome("separate", note=f"sweep.batched: {e}; trained separately")
                )
            print(f"gpdlm: sweep.batched: {e}; {len(configs)} jobs trained separately", file=sys.stderr)
            return _STORE.pop((sweep, key))
    for k, outcome in outcomes.items():
        _STORE[(sweep, k)] = outcome
    size = len(outcomes)
    print(f"gpdlm: sweep.batched: trained {size} jobs of model={cfg.model.name} as one batched model", file=sys.stderr)
    return _STORE.pop((sweep, key))


def _svgp_member(c, evaluator, stage_cache):
    """A job of the sparse variational family as a ``Member``: prepared as its run would be, its earlier
    stages (if any) trained as its run trains them. Returns (member, (prepared, settings, earlier fit, steps))."""
    from ..objectives import DLM
    from ..objectives.collapsed_elbo import CollapsedELBO
    from ..prepare import prepare
    from ..training import FitResult, run_stages, stage_settings
    from .batched_model import Member, NotBatchable

    p = prepare(c)
    method = p.method
    *earlier, stage = method.stages
    if stage.solve is not None or any(st.solve is not None for st in earlier):
        raise NotBatchable(f"model={c.model.name} solves a stage in closed form")
    objective = stage.objective
    kind = (
        "collapsed_elbo" if isinstance(objective, CollapsedELBO) else "log_loss" if isinstance(objective, DLM) else None
    )
    if kind is None or stage.stochastic or getattr(stage, "blocks", None) is not None or stage.wants_index:
        raise NotBatchable(f"the {stage.name} stage has no batched form")
    evaluate = evaluator(method, p.data, p.splits.y_std)
    pre, pre_steps = FitResult(), {}
    if earlier:  # trained as the member's own run trains them (the stage cache shares them across betas)
        if method.estimator is not None:
            method.estimator.seed(c.seed, p.device)
        est_gen = method.estimator.random.generator(p.device) if hasattr(method.estimator, "random") else None

        def collect(series, into=pre_steps):
            for name, pts in series.items():
                into.setdefault(name, []).extend(pts)

        pre = run_stages(
            earlier,
            p.data.x_train,
            p.data.y_train,
            p.settings,
            generator=torch.Generator().manual_seed(c.seed),
            evaluate=evaluate,
            log_steps=collect,
            modules=method.modules,
            cache=stage_cache(c) if stage_cache is not None else None,
            generators=[est_gen],
        )
    if stage.prepare is not None:
        stage.prepare()
    method.model._ensure_initialised()  # q(u)'s start, drawn from torch's RNG as the separate run draws it
    s = stage_settings(p.settings, stage, p.n_train)
    member = Member(
        kind,
        method.model,
        method.likelihood,
        p.data.x_train,
        p.data.y_train,
        float(c.objective.beta),
        stage.groups,
        list(stage.hooks),
        evaluate if (s.eval_every or s.eval_every_epochs) else None,
        objective=objective,
    )
    return member, (p, s, pre, pre_steps)


def _svgp_group(key: str, configs: list, evaluator, stage_cache=None) -> dict[str, BatchedOutcome]:
    """Prepare every member as its own run would, train its earlier stages (if any) as its own run
    would, train the last stage of all members batched; each member's outcome by its config hash."""
    from ..exceptions import GpdlmError
    from .batched_model import NotBatchable

    members, prepared, keys = [], [], []
    for c in configs:
        k = config_hash(c)
        try:
            member, prep = _svgp_member(c, evaluator, stage_cache)
        except GpdlmError:
            if k == key:
                raise
            continue  # that job reports its own error when it runs
        members.append(member)
        prepared.append(prep)
        keys.append(k)
    settings = [s for _, s, _, _ in prepared]
    s0 = settings[0]
    if any(s != s0 for s in settings[1:]):
        raise NotBatchable("the members' trainer settings differ")
    if s0.optimizer != "adam" or not s0.schedule.constant or s0.keep_best:
        raise NotBatchable("only Adam with a constant learning rate and no keep_best is batched")
    cap = s0.max_iters if s0.max_iters is not None else s0.max_epochs
    if s0.max_epochs:
        cap = min(cap, s0.max_epochs)  # full batch: one iteration is one epoch
    if cap is None:
        raise NotBatchable("no iteration budget")
    checkpoint = _group_checkpoint(configs[0], keys)
    fits = _train_checkpointed(
        checkpoint,
        members,
        max_iters=int(cap),
        lr=s0.lr,
        lr_scale=s0.lr_scale,
        eps=s0.optimizer_options.get("eps"),
        stop=s0.stop,
        stop_rule=s0.stop_rule,
        check_every=s0.check_every,
        eval_every=s0.eval_every,
        eval_every_epochs=s0.eval_every_epochs,
        step_offsets=[pre.iterations for _, _, pre, _ in prepared],
    )
    size = str(len(members))
    out = {k: _svgp_outcome(size, prep, f) for k, prep, f in zip(keys, prepared, fits)}
    if checkpoint is not None and checkpoint.resumed_at is not None:
        note = f"sweep.batched: the group of {size} continued from its checkpoint at iteration {checkpoint.resumed_at}"
        print(f"gpdlm: {note} ({checkpoint.path})", file=sys.stderr)
        for o in out.values():
            o.note, o.continued = note, True
    return out


def _group_checkpoint(cfg, keys: list[str]):
    """The full-batch group's ``BatchCheckpoint`` (None with ``trainer.checkpoint_every=0``):
    ``<sweep.cache_dir>/batched/group-<hash of its members' config hashes>.pt``, continued only with
    ``sweep.skip_finished`` (a sweep run again without it trains everything again)."""
    import hashlib

    from .batched_model import BatchCheckpoint

    every = int(cfg.trainer.get("checkpoint_every", 5))
    if every <= 0:
        return None
    key = hashlib.sha256(",".join(sorted(keys)).encode()).hexdigest()[:16]
    folder = Path(str(cfg.sweep.get("cache_dir", "outputs/.cache"))) / "batched"
    return BatchCheckpoint(folder / f"group-{key}.pt", key, every, resume=bool(cfg.sweep.get("skip_finished", False)))


def _train_checkpointed(checkpoint, members, **options):
    """``train_batched`` with the group's checkpoint, removed once the group trained or turned out not batchable
    (its members then train separately)."""
    from .batched_model import NotBatchable, train_batched

    try:
        fits = train_batched(members, checkpoint=checkpoint, **options)
    except NotBatchable:
        if checkpoint is not None:
            checkpoint.remove()
        raise
    if checkpoint is not None:
        checkpoint.remove()
    return fits


def _svgp_outcome(size: str, prep, f) -> BatchedOutcome:
    """A member's outcome: its earlier stages' fit and steps followed by its batched stage's."""
    from ..training import FitResult
    from ..training.reuse import module_state

    p, _, pre, pre_steps = prep
    stage = p.method.stages[-1]
    stage_ms = ([pre.iter_ms] if pre.optimizers else []) + [f.iter_ms]  # run_stages: the median over trained stages
    fit = FitResult(
        iterations=pre.iterations + f.iterations,
        train_seconds=pre.train_seconds + f.train_seconds,
        iter_ms=sorted(stage_ms)[len(stage_ms) // 2],
        converged=pre.converged and f.converged,
        epochs=pre.epochs + f.iterations,
        stop_rules=pre.stop_rules + [f.stop_rule],
        optimizers=pre.optimizers + [f"{stage.name}:adam"],
        reused=list(pre.reused),
        losses=pre.losses + list(f.losses),
        stage_final_loss={**pre.stage_final_loss, **({stage.name: float(f.losses[-1])} if f.losses else {})},
    )
    steps = {name: list(pts) for name, pts in pre_steps.items()}
    for name, pts in f.steps.items():
        steps.setdefault(name, []).extend(pts)
    return BatchedOutcome(size, fit=fit, state=module_state(p.method.modules), steps=steps)


__all__ = ["BatchedOutcome", "batched_member", "clear_batched", "out_of_scope", "shape_key"]
