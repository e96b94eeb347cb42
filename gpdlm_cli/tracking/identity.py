"""What makes two runs the same run: the config hash that `sweep.skip_finished`, checkpoints,
reruns and the analysis commands compare (tag ``gpdlm.config_hash``). Low in the layers: the run
lifecycle (``run/``), the sweep callbacks (``sweep.callback``) and ``analysis.store`` use it.

Two versions exist. Version 2 (``config_hash``, tag ``gpdlm.config_hash_version=2``) hashes only
what determines a run's result: the config without where it is tracked (``tracking``), how it shows
progress, how its sweep is organised (``sweep``, ``hydra``), the torch thread count, the device,
the checkpoint interval and, outside ``gpdlm bias``, the ``bias`` block. It is computed from the
flattened config with every value as the string MLflow stores as the run's param, so the same hash
can be recomputed from any run's params (``params_hash``) -- also for runs of stores written before
version 2. Version 1 (``legacy_config_hash``) also hashed ``threads``, ``device`` and the rest:
one seed trained at two thread counts counted as two runs. Runs tagged with it are still found
(``config_hashes`` gives both for ``sweep.skip_finished``) and regrouped from their params.
"""

from __future__ import annotations

import hashlib
import json

#: config groups that do not change what a run trains (where it is tracked, how it shows progress,
#: how the sweep around it is organised, Hydra's own settings)
IGNORED_KEYS = ("tracking", "progress", "sweep", "hydra")
#: version 2 also leaves out these dotted keys (and ``bias.*`` outside ``gpdlm bias``): they change
#: how fast or where a run trains, or how often it writes a checkpoint, not what it learns
RESULT_NEUTRAL = ("threads", "device", "trainer.checkpoint_every")
VERSION = "2"
VERSION_TAG = "gpdlm.config_hash_version"
COMMAND_KEY = "gpdlm_command"  # ``gpdlm bias`` adds it to the config it hashes


def _param_str(v) -> str:
    """A value as MLflow stores a param (``tracking.tracker._param_str``)."""
    s = "None" if v is None else str(v)
    return s[:6000]


def _flatten(d: dict, prefix: str = "") -> dict:
    """{'a': {'b': 1}} -> {'a.b': 1}, as the run's params are logged (``tracking.flatten``)."""
    out: dict = {}
    for k, v in d.items():
        if isinstance(v, dict):
            out.update(_flatten(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


def _neutral(key: str, bias: bool) -> bool:
    top = key.split(".", 1)[0]
    return top in IGNORED_KEYS or key in RESULT_NEUTRAL or (top == "bias" and not bias)


def params_hash(params: dict, command: str | None = None) -> str:
    """Version 2 of the hash from a run's flattened params ({'model.name': 'svgp', ...}, values as
    strings); ``command='bias'`` for a ``gpdlm bias`` run. Equals ``config_hash`` of the config the
    run logged."""
    items = {str(k): str(v) for k, v in params.items()}
    if command == "bias":
        items[COMMAND_KEY] = "bias"
    bias = items.get(COMMAND_KEY) == "bias"
    kept = {k: v for k, v in items.items() if not _neutral(k, bias)}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _resolved(cfg) -> dict:
    """The resolved config as plain dicts and lists (a run's config is a mapping)."""
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(d, dict):
        raise TypeError(f"a run's config is a mapping, not {type(d).__name__}")
    return d


def config_hash(cfg, without: tuple[str, ...] = ()) -> str:
    """SHA-256 (16 hex) of what determines the result of a run of ``cfg`` (version 2, module
    docstring): two runs with the same hash trained the same thing, whatever the tracking target,
    output folder, thread count or device. ``without``: dotted keys also left out (``sweep.batched``
    groups jobs by the hash without seed and objective.beta)."""
    flat = _flatten(_resolved(cfg))
    for dotted in without:
        flat = {k: v for k, v in flat.items() if k != dotted and not k.startswith(dotted + ".")}
    return params_hash({k: _param_str(v) for k, v in flat.items()})


def legacy_config_hash(cfg) -> str:
    """Version 1 of the hash (gpdlm before ``gpdlm.config_hash_version``): the resolved config
    without ``IGNORED_KEYS`` only. Kept to find the runs of existing stores."""
    d = _resolved(cfg)
    for k in IGNORED_KEYS:
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_hashes(cfg) -> tuple[str, str]:
    """(version 2, version 1) of ``cfg``'s hash: a FINISHED run tagged with either is this config's."""
    return config_hash(cfg), legacy_config_hash(cfg)


def run_identity(params: dict, tags: dict) -> str | None:
    """The version-2 hash of a logged run: its ``gpdlm.config_hash`` tag when the run carries
    version 2, else recomputed from its params (runs of older stores); None without the tag."""
    h = tags.get("gpdlm.config_hash")
    if not h:
        return None
    if tags.get(VERSION_TAG) == VERSION:
        return h
    return params_hash(params, tags.get("gpdlm.command"))
