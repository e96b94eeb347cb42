"""``gpdlm train``: one experiment (or a multirun sweep with ``-m``) from Hydra overrides.

The shell only: Hydra composes the config from the arguments, ``hydra_apps.run_job`` runs the job
(one-line errors, exit codes, sweep bookkeeping) and ``run.train.run_train`` does the work
(``prepare``, then the tracked-run lifecycle of ``run.lifecycle``).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def train_main(cfg: DictConfig):
    """``gpdlm train``: one experiment (run/train.py)."""
    from ..hydra_apps import run_job
    from ..run.naming import run_name_for
    from ..run.train import run_train

    return run_job(cfg, run_train, run_name=run_name_for)
