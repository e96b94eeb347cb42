"""What a multirun will do, before it does it (issue 21, item 6): the jobs, the protocol, what is
shared, and -- for ``--dry-run`` -- the estimated wall time on this machine.

The job list is Hydra's basic sweeper's: the cartesian product of the preset's
``hydra.sweeper.params`` and the command line's sweep overrides. The estimate times a few
iterations of one job of every *shape* (model x training size x batch size) in this process and
multiplies by each job's iteration budget: the paper protocol's ``max_iters`` per stage (Adam rarely
meets the window rule earlier, docs/performance.md), the fast protocol's ``fast_max_iters`` for its L-BFGS stages
(an upper bound: they usually stop earlier). Jobs whose SVGP stage is shared count it once per key.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field


@dataclass
class SweepPlan:
    jobs: list[list[str]]
    protocol: str
    share_stages: bool
    warm_start: bool
    launcher: str
    parallel: int
    per_shape: dict = field(
        default_factory=dict
    )  # shape -> [(stage, shareable, iterations, ms/iteration, L-BFGS, seconds)]
    estimate_s: float | None = None
    batched: bool = False  # sweep.batched
    batch_sizes: list[int] = field(default_factory=list)  # sweep.batched: the members of each batch (sweep.batched)
    separate: int = 0  # sweep.batched: jobs trained one by one (out of scope, or alone in their shape)

    def batching(self) -> str:
        """``not batched``, or ``batched: K groups of B members`` (and how many jobs train separately)."""
        if not self.batched:
            return "not batched"
        if not self.batch_sizes:
            return f"batched: none ({self.separate} jobs trained separately)"
        lo, hi = min(self.batch_sizes), max(self.batch_sizes)
        k = len(self.batch_sizes)
        line = f"batched: {k} group{'s' if k > 1 else ''} of {lo if lo == hi else f'{lo}-{hi}'} members"
        return line + (f", {self.separate} jobs separately" if self.separate else "")

    def summary(self) -> str:
        shared = "shared beta-free stages" if self.share_stages else "no shared stages"
        warm = ", warm-started beta paths" if self.warm_start else ""
        line = (
            f"gpdlm: sweep of {len(self.jobs)} jobs, trainer.protocol={self.protocol}, {shared}{warm}, "
            f"launcher {self.launcher}" + (f" x{self.parallel}" if self.parallel > 1 else "") + f", {self.batching()}"
        )
        if self.estimate_s is not None:
            line += f"; estimated wall time on this machine: {_duration(self.estimate_s)} (an upper bound)"
        return line


def _duration(s: float) -> str:
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.0f} min"
    return f"{s / 3600:.1f} h"


def job_overrides(overrides: list[str]) -> tuple[list[list[str]], object]:
    """(the override list of every job, the composed config of the first job with Hydra's keys)."""
    from hydra import compose

    from .compose import config_module, overrides_parser

    with config_module():
        cmd = overrides_parser().parse_overrides([o for o in overrides if o != "-m"])
        first = [
            f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}" if o.is_discrete_sweep() else o.input_line
            for o in cmd
        ]
        cfg = compose(config_name="config", overrides=first, return_hydra_config=True)
    return sweep_jobs(overrides, cfg.hydra.sweeper.get("params")), cfg


def sweep_jobs(overrides: list[str], params) -> list[list[str]]:
    """The override list of every job of a basic sweep: the command line's ``overrides`` and the
    preset's ``hydra.sweeper.params`` (no config composed: safe inside a running Hydra app)."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

    from .compose import config_module, overrides_parser

    with config_module():  # the config loader expands glob(...) over a group's options
        parser = overrides_parser()
        cmd = parser.parse_overrides([o for o in overrides if o != "-m"])
        params = [f"{k}={v}" for k, v in (params or {}).items()]
        jobs = [list(j) for j in BasicSweeper.split_arguments(parser.parse_overrides(params) + cmd, None)[0]]
    from .beta_free import collapse_beta_free

    return collapse_beta_free(jobs)[0]  # gpdlm's sweeper launches a beta-free model once per configuration


def plan(overrides: list[str], *, estimate: bool = False, sample_iterations: int = 5) -> SweepPlan:
    jobs, cfg = job_overrides(overrides)
    launcher = str(cfg.hydra.launcher.get("_target_", "basic")).rsplit(".", 1)[-1].replace("Launcher", "").lower()
    n_jobs = cfg.hydra.launcher.get("n_jobs") or 1
    p = SweepPlan(
        jobs,
        str(cfg.trainer.get("protocol", "paper")),
        bool(cfg.sweep.get("share_stages", True)),
        bool(cfg.sweep.get("warm_start", False)),
        launcher or "basic",
        int(n_jobs) if n_jobs > 0 else 1,
    )
    if cfg.sweep.get("batched", False):
        p.batched = True
        p.batch_sizes, p.separate = batch_groups(jobs)
    if estimate:
        p.estimate_s = _estimate(p, sample_iterations)
    return p


def batch_groups(jobs: list[list[str]]) -> tuple[list[int], int]:
    """``sweep.batched``: (the member count of every batch, the number of jobs trained separately) --
    jobs grouped by ``sweep.batched.shape_key``; a job out of scope or alone in its shape is separate."""
    from .batched import out_of_scope, shape_key
    from .compose import compose_jobs

    shapes: dict[str, int] = {}
    separate = 0
    for cfg in compose_jobs(jobs):
        if out_of_scope(cfg) is not None:
            separate += 1
        else:
            key = shape_key(cfg)
            shapes[key] = shapes.get(key, 0) + 1
    sizes = [n for n in shapes.values() if n > 1]
    return sizes, separate + sum(n for n in shapes.values() if n == 1)


def _estimate(p: SweepPlan, k: int) -> float:
    """The sweep's estimated seconds; the probes run at each job's torch threads, and the calling process's
    thread count is put back after (a test process or a reproduce that goes on to run the jobs)."""
    import torch

    threads = torch.get_num_threads()
    try:
        return _estimate_at_job_threads(p, k)
    finally:
        torch.set_num_threads(threads)


def _estimate_at_job_threads(p: SweepPlan, k: int) -> float:
    from hydra import compose

    from ..build import configure_threads
    from ..prepare import prepare
    from ..training import run_stages, stage_settings
    from ..training.stages import first_order_prefix, uses_lbfgs
    from .compose import config_module

    total, shared_seen = 0.0, set()
    with config_module():
        for job in p.jobs:
            cfg = compose(config_name="config", overrides=list(job))
            shape = (
                f"{cfg.model.name}" + (f"_{cfg.model.variant}" if cfg.model.get("variant") else ""),
                cfg.dataset.name,
                cfg.dataset.split.get("train_size"),
                cfg.trainer.batch_size,
                cfg.model.get("num_inducing"),
            )
            if shape not in p.per_shape:
                # the job's own torch threads (``threads``, shared among the launcher's parallel jobs): timed
                # at the process default (every core) on a loaded machine, a minibatch step took ~13x longer
                configure_threads(cfg.get("threads", "auto"), p.parallel)
                prepared = prepare(cfg)
                splits, data, method, settings = prepared.splits, prepared.data, prepared.method, prepared.settings
                stages = []
                for stage in method.stages:
                    if stage.solve is not None:
                        continue
                    s = stage_settings(settings, stage, splits.n_train)
                    cap = s.max_iters or (s.max_epochs or 1) * max(
                        1, splits.n_train // (s.batch_size or splits.n_train)
                    )
                    quick = dataclasses.replace(
                        settings,
                        max_iters=2,
                        max_epochs=None,
                        eval_every=0,
                        fast_adam_iters=0,
                        eval_every_epochs=None,
                        keep_best=None,
                        stop_rule="none",
                        progress=False,
                    )

                    def ms_per_iteration(q, stage=stage, data=data):
                        """ms per iteration from two timed probes of k and 3k iterations: their difference
                        leaves out what every call of run_stages costs once (building the stage's optimiser
                        and state: ~0.2 s for an RKHS stage, whose minibatch step is ~3 ms -- timing k = 5
                        steps alone made it 40 ms, and a 100-epoch job's estimate 8-50x too long)."""

                        def timed(iters: int) -> float:
                            t0 = time.perf_counter()
                            run_stages(
                                [stage],
                                data.x_train,
                                data.y_train,
                                dataclasses.replace(q, max_iters=iters),
                                generator=_gen(),
                            )
                            return time.perf_counter() - t0

                        run_stages(
                            [stage], data.x_train, data.y_train, q, generator=_gen()
                        )  # warm-up: caches, first calls
                        short, long = timed(k), timed(3 * k)
                        per = (long - short) / (2 * k)
                        if per <= 0:  # timing noise (a loaded machine): the long probe's mean, an upper bound
                            per = long / (3 * k)
                        return 1000 * per

                    ms = ms_per_iteration(quick)
                    seconds = cap * ms / 1000
                    prefix = first_order_prefix(settings, stage, splits.n_train)
                    if prefix is not None:  # the fast protocol's first-order start, at the paper optimiser's speed
                        seconds += (
                            prefix.max_iters * ms_per_iteration(dataclasses.replace(quick, protocol="paper")) / 1000
                        )
                    stages.append(
                        (
                            stage.name,
                            bool(getattr(stage, "shareable", False)),
                            cap,
                            ms,
                            uses_lbfgs(stage, settings, splits.n_train) and s.protocol == "fast",
                            seconds,
                        )
                    )
                p.per_shape[shape] = stages
            for name, shareable, _cap, _ms, _, seconds in p.per_shape[shape]:
                key = (shape, name, cfg.seed, cfg.dataset.split.get("train_size"))
                if shareable and p.share_stages:
                    if key in shared_seen:
                        continue
                    shared_seen.add(key)
                total += seconds
    return total / max(1, p.parallel)


def _gen():
    import torch

    return torch.Generator().manual_seed(0)


__all__ = ["SweepPlan", "batch_groups", "job_overrides", "plan", "sweep_jobs"]
