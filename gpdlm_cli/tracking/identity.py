"""What makes two runs the same run: the config hash that `sweep.skip_finished`, checkpoints and
reruns compare (tag ``gpdlm.config_hash``). Low in the layers: the run lifecycle (``run/``) and the
sweep callbacks (``tracking.sweep``) both use it."""

from __future__ import annotations

import hashlib
import json

#: config groups that do not change what a run trains (where it is tracked, how it shows progress,
#: how the sweep around it is organised, Hydra's own settings)
IGNORED_KEYS = ("tracking", "progress", "sweep", "hydra")


def config_hash(cfg, without: tuple[str, ...] = ()) -> str:
    """SHA-256 (16 hex) of the resolved config without bookkeeping keys: two runs with the same
    hash trained the same thing, whatever the tracking target or output folder. ``without``: dotted
    keys also left out (``sweep.batched`` groups jobs by the hash without seed and objective.beta)."""
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg, resolve=True)
    for k in IGNORED_KEYS:
        d.pop(k, None)
    for dotted in without:
        *path, last = dotted.split(".")
        node = d
        for part in path:
            node = node.get(part, {}) if isinstance(node, dict) else {}
        if isinstance(node, dict):
            node.pop(last, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]
