"""``gpdlm bias``: the DLM paper's gradient-bias statistics of a stochastic estimator.

The shell only: Hydra composes the config from the arguments, ``hydra_apps.run_job`` runs the job
and ``run.bias.run_bias`` does the study (protocol in its docstring and in docs/bias.md).
"""

from __future__ import annotations

import hydra
from omegaconf import DictConfig


@hydra.main(version_base="1.3", config_path="../conf", config_name="config")
def bias_main(cfg: DictConfig):
    """``gpdlm bias``: the DLM paper's gradient-bias statistics (run/bias.py)."""
    from ..hydra_apps import run_job
    from ..run.bias import run_bias

    return run_job(cfg, run_bias)
