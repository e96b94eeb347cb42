"""Hydra's basic sweeper, composing one job per config *structure* before the launch instead of every job.

Hydra's ``BasicSweeper`` composes every job's config in the launching process before it launches a
batch (``Sweeper.validate_batch_is_legal``), so that a job that cannot be composed fails the sweep
early; the launcher then composes each job again where it runs. At ~0.1 s a composition, the 1,110
jobs of ``regression_logloss_pol`` kept the launching process busy -- and every worker idle -- for
about two minutes before the first job started. Jobs whose overrides differ only in plain values of
the same keys (``objective.beta=0.5`` against ``objective.beta=2``; not a config group, not a
``hydra.`` key, not an added or deleted key, the same type of value) walk the same defaults tree and
set the same keys, so they compose or fail together: ``GpdlmSweeper`` composes the first job of
each such structure (``gpdlm_cli.sweep.callback.jobs_to_compose``) and otherwise is the basic
sweeper -- same ``params``, ``max_batch_size``, job order and batches. Every job still composes and
validates its own config when it runs (a bad value fails that job with its one-line reason).

With Hydra's basic launcher (one process), a config the check composed is handed to the launch of its job
instead of being composed a second time (``_reuse_for_launch``): the same call with the same master
config and overrides, made a moment earlier. At most ``REUSED`` are kept at a time (~1-2 MB each).

Hydra only instantiates plugins from the ``hydra_plugins`` namespace package, hence this module.
"""

from __future__ import annotations

from collections.abc import Sequence

from hydra._internal.core_plugins.basic_launcher import BasicLauncher
from hydra._internal.core_plugins.basic_sweeper import BasicSweeper

#: how many configs composed by the pre-launch check are kept for their jobs' launch at a time
REUSED = 64


def _reuse_for_launch(loader) -> tuple:
    """(the loader's own ``load_sweep_config``, the configs kept for the launch): on first use the loader's
    ``load_sweep_config`` becomes one that hands out a kept config (once) for the same master config and
    overrides, and composes any other."""
    kept = loader.__dict__.get("_gpdlm_kept")
    compose = type(loader).load_sweep_config.__get__(loader)
    if kept is None:
        kept = {}

        def load_sweep_config(master_config, sweep_overrides):
            found = kept.pop((id(master_config), tuple(sweep_overrides)), None)
            return found if found is not None else compose(master_config, sweep_overrides)

        loader.load_sweep_config = load_sweep_config
        loader._gpdlm_kept = kept
    return compose, kept


class GpdlmSweeper(BasicSweeper):
    """``BasicSweeper`` whose pre-launch check composes one job per config structure (module docstring),
    which launches a model that ignores ``objective.beta`` once per configuration, not once per
    beta (``gpdlm_cli.sweep.beta_free``), and which with ``sweep.skip_finished`` leaves out the jobs of a
    ``gpdlm train`` multirun that have a FINISHED run (``gpdlm_cli.sweep.callback.leave_out_finished``)."""

    _trains = False  # the task is `gpdlm train` (its config hash is the one the finished runs carry)
    _left_out = False  # the finished jobs are left out (once, before the first batch)

    def setup(self, *, hydra_context, task_function, config) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self._trains = getattr(task_function, "__module__", "") == "gpdlm_cli.commands.train"

    def is_done(self) -> bool:
        if not self._left_out and self.overrides is not None:  # the sweep's first look at its batches
            self._left_out = True
            if self._trains:
                from gpdlm_cli.sweep.callback import leave_out_finished

                jobs = leave_out_finished(self.config, [job for batch in self.overrides for job in batch])
                self.overrides = (
                    [jobs]
                    if self.max_batch_size is None
                    else list(self.split_overrides_to_chunks(jobs, self.max_batch_size))
                )
                self.overrides = [b for b in self.overrides if b]
        return super().is_done()

    @staticmethod
    def split_arguments(overrides, max_batch_size):
        import sys

        from gpdlm_cli.sweep.beta_free import collapse_beta_free, collapse_note

        jobs = [job for batch in BasicSweeper.split_arguments(overrides, None) for job in batch]
        jobs, dropped = collapse_beta_free(jobs)
        if dropped:
            print(f"gpdlm: note: {collapse_note(dropped)}", file=sys.stderr)
        if max_batch_size is None:
            return [jobs]
        return list(BasicSweeper.split_overrides_to_chunks(jobs, max_batch_size))

    def validate_batch_is_legal(self, batch: Sequence[Sequence[str]]) -> None:
        from gpdlm_cli.sweep.callback import jobs_to_compose

        loader = self.hydra_context.config_loader
        options: dict[str, bool] = {}

        def is_group(key: str) -> bool:
            if key not in options:
                options[key] = bool(loader.get_group_options(key))
            return options[key]

        launcher = type(getattr(self, "launcher", None))
        if (launcher.__module__, launcher.__name__) == (BasicLauncher.__module__, "BasicLauncher"):
            compose, kept = _reuse_for_launch(loader)
        else:  # another process composes the job (joblib, submitit, ray): nothing to hand over
            compose, kept = loader.load_sweep_config, None
        for i in jobs_to_compose(batch, is_group):
            cfg = compose(self.config, list(batch[i]))
            if kept is not None and len(kept) < REUSED:
                kept[(id(self.config), tuple(batch[i]))] = cfg
