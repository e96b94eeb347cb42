"""Composing gpdlm's configs from Hydra overrides, also from inside a running Hydra app (a multirun's
callback or one of its jobs), where ``initialize_config_module`` alone refuses: the sweep plan
(``sweep.plan``) and batched configurations (``sweep.batched``) compose every job of a sweep."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def config_module():
    """``initialize_config_module`` for gpdlm's configs that also works inside a running Hydra app
    (a multirun's callback or job): Hydra's global state and ``HydraConfig`` are put back after."""
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.hydra_config import HydraConfig
    from hydra.initialize import get_gh_backup, restore_gh_from_backup

    backup, saved = get_gh_backup(), HydraConfig.instance().cfg
    GlobalHydra.instance().clear()
    try:
        with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
            yield
    finally:
        restore_gh_from_backup(backup)
        HydraConfig.instance().cfg = saved


def overrides_parser():
    """Hydra's override parser with the current config loader (inside ``config_module``), which
    ``glob(...)`` needs to list a config group's options."""
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create(config_loader=GlobalHydra.instance().config_loader())


def compose_jobs(jobs: list[list[str]]) -> list:
    """Each job's config as ``gpdlm train`` composes it (``config_module``: also from inside a job)."""
    from hydra import compose

    with config_module():
        return [compose(config_name="config", overrides=list(j)) for j in jobs]


__all__ = ["compose_jobs", "config_module", "overrides_parser"]
