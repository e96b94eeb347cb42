"""What makes two runs the same run: the config hash that `sweep.skip_finished`, checkpoints,
reruns and the analysis commands compare (tag ``gpdlm.config_hash``). Low in the layers: the run
lifecycle (``run/``), the sweep callbacks (``sweep.callback``) and ``analysis.store`` use it.

Three versions exist. Version 3 (``config_hash``, tag ``gpdlm.config_hash_version=3``) hashes only
what determines a run's result: the config without where it is tracked (``tracking``), how it shows
progress, how its sweep is organised (``sweep``, ``hydra``), the torch thread count, the device,
the checkpoint interval and, outside ``gpdlm bias``, the ``bias`` block. It is computed from the
flattened config with every value as the string MLflow stores as the run's param, so the same hash
can be recomputed from any run's params (``params_hash``) -- also for runs of stores written before
version 3.

Version 3 is version 2 with the recurrent GP models' protocol keys under their model's config:
``trainer.<key>`` became ``model.training.<key>`` for the six ``PROTOCOL_KEYS`` (issue 46). Old params
are read in the new names by ``canonical_params`` -- the one place the renaming lives; the analysis
commands (``analysis.records``), ``run_identity`` and ``params_hash`` go through it -- and an old run
folder's config by ``canonical_config`` (``run.lifecycle.canonical_run_config``). Which runs own the
keys is decided from the params alone, without importing the model families (this layer sits below
them): **a run owns them when its params carry ``model.gp.*``** (the recurrent GP models, the only
models with a ``gp`` block); every other run carried them as ignored trainer defaults (or, under the
recurrent presets, the network baselines as ignored preset values), so they are dropped from its
identity, old or new: a baseline's ``model.training.*`` never makes it another run.

Version 2 (``gpdlm.config_hash_version=2``, gpdlm before issue 46) hashed the same config with the keys
still under ``trainer`` (every run had them); version 1 (``legacy_config_hash``, no version tag) also
hashed ``threads``, ``device`` and the rest. Runs tagged with either are still found:
``config_hashes`` gives all three of a config for ``sweep.skip_finished`` and checkpoints (the old
ones computed on the config put back in the old shape, ``_as_version_2``: exact for every config
whose non-GP runs left the keys at their defaults), and ``run_identity`` regroups them from their
params.

Keys added since (``ADDED_KEYS``) leave every version's hash unchanged at the value all earlier runs
trained with, so adding one to the config renames no run; set to anything else they count.
"""

from __future__ import annotations

import hashlib
import json

#: config groups that do not change what a run trains (where it is tracked, how it shows progress,
#: how the sweep around it is organised, Hydra's own settings)
IGNORED_KEYS = ("tracking", "progress", "sweep", "hydra")
#: version 2 also leaves out these dotted keys (and ``bias.*`` outside ``gpdlm bias``): they change
#: how fast or where a run trains, or how often it writes a checkpoint, not what it learns
RESULT_NEUTRAL = ("threads", "device", "trainer.checkpoint_every", "trainer.checkpoint_minutes")
VERSION = "3"
VERSION_TAG = "gpdlm.config_hash_version"
COMMAND_KEY = "gpdlm_command"  # ``gpdlm bias`` adds it to the config it hashes
#: the recurrent GP models' protocol keys: ``trainer.<key>`` up to version 2, ``model.training.<key>`` since
#: version 3 (methods/recurrent.py's ``TrainingSpec`` declares them; a test keeps the two lists equal)
PROTOCOL_KEYS = (
    "algorithm",
    "kernel_refresh_every",
    "theta_steps",
    "final_theta_steps",
    "lr_over_tau",
    "refresh_check",
)
#: old dotted name -> new dotted name
RENAMED = {f"trainer.{k}": f"model.training.{k}" for k in PROTOCOL_KEYS}
#: the values every version-2 config carried for them (conf/trainer/paper.yaml before version 3)
VERSION_2_DEFAULTS = {
    "algorithm": "full",
    "kernel_refresh_every": None,
    "theta_steps": 10,
    "final_theta_steps": 100,
    "lr_over_tau": True,
    "refresh_check": True,
}
_NEW_NAMES = frozenset(RENAMED.values())
#: keys added to the config after version 3, with the value every earlier run trained with: at that value a
#: key is left out of every version's hash (a run of today's config is the run it was before the key existed),
#: at any other it counts, for every model that carries it (``model.training.feedback``: the recurrent
#: models' training windows, the networks' too, so it is not one of ``PROTOCOL_KEYS``)
ADDED_KEYS = {
    "model.training.feedback": "true_targets",
    "trainer.checkpoint_minutes": 10.0,
    "model.training.feedback_conditioning": "rollouts",
}


def renamed_message(key: str, value=...) -> str:
    """The one line for a dotted key that version 3 renamed (``RENAMED``; '' for any other key), with
    the value the user gave (``...``: not known)."""
    new = RENAMED.get(key)
    if new is None:
        return ""
    shown = (
        "..."
        if value is ...
        else "null"
        if value is None
        else str(value).lower()
        if isinstance(value, bool)
        else str(value)
    )
    return (
        f"'{key}' is now '{new}': the recurrent GP models' protocol keys moved from trainer to the model's "
        f"config (see CHANGELOG.md); write {new}={shown}"
    )


def renamed_sweep_param(params) -> str:
    """The one line (``renamed_message``) for the first key of a sweeper's ``params`` (a preset's or
    the command line's ``hydra.sweeper.params`` as a plain dict: {dotted key: the values to sweep, as
    Hydra override text}) that version 3 renamed, with ``+``/``++``/``~`` prefixes ignored and nested
    dicts read as dotted keys (``+hydra.sweeper.params.trainer.algorithm=...`` nests); '' when none is
    renamed. Hydra would answer such a key with "Could not override 'trainer.algorithm'" only after the
    sweep had started."""
    items = list((params or {}).items())
    while items:
        key, value = items.pop(0)
        if isinstance(value, dict):
            items[:0] = [(f"{key}.{k}", v) for k, v in value.items()]
            continue
        message = renamed_message(str(key).lstrip("+~"), value)
        if message:
            return message
    return ""


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


def owns_protocol_keys(keys) -> bool:
    """Whether a run with these (flattened, dotted) config keys is a recurrent GP model's: it has
    ``model.gp.*`` (module docstring)."""
    return any(str(k).startswith("model.gp.") for k in keys)


def canonical_params(params: dict) -> dict:
    """A run's flattened params in version 3's names: ``trainer.<key>`` of ``PROTOCOL_KEYS`` read as
    ``model.training.<key>`` when the run owns them (``owns_protocol_keys``), and dropped otherwise, in
    either name (they never changed its result). Params already in the new names pass unchanged, so
    applying it twice is applying it once."""
    owner = owns_protocol_keys(params)
    out = {}
    for k, v in params.items():
        name = RENAMED.get(k, k)
        if name in _NEW_NAMES and not owner:
            continue
        out[name] = v
    return out


def canonical_config(config: dict) -> dict:
    """A run's config (nested plain dicts, e.g. an old run folder's ``config.yaml``) in version 3's
    shape: the protocol keys of an old ``trainer`` group moved to ``model.training`` when the model owns
    them (``model.gp``), else removed. A version-3 config comes back equal. A new dict; ``config``
    is not changed."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    trainer, model = out.get("trainer"), out.get("model")
    if not isinstance(trainer, dict) or not any(k in trainer for k in PROTOCOL_KEYS):
        return out
    moved = {k: trainer.pop(k) for k in PROTOCOL_KEYS if k in trainer}
    if isinstance(model, dict) and isinstance(model.get("gp"), dict):
        model["training"] = {**moved, **dict(model.get("training") or {})}
    return out


def _as_version_2(config: dict) -> dict:
    """The version-2 shape of a version-3 config (nested plain dicts): ``model.training`` back under
    ``trainer``, and the keys a model does not own at their version-2 defaults, as every run carried
    them then."""
    out = {k: (dict(v) if isinstance(v, dict) else v) for k, v in config.items()}
    model = out.get("model")
    training = model.pop("training", None) if isinstance(model, dict) else None
    for dotted, default in ADDED_KEYS.items():  # not in version 2's config
        leaf = dotted.removeprefix("model.training.")
        if isinstance(training, dict) and leaf != dotted and training.get(leaf, default) == default:
            training = {k: v for k, v in training.items() if k != leaf}
    trainer = out.get("trainer")
    if isinstance(trainer, dict):
        trainer.update(training or {})
        for k, v in VERSION_2_DEFAULTS.items():
            trainer.setdefault(k, v)
    for dotted, default in ADDED_KEYS.items():  # the group-level ones (trainer.checkpoint_minutes), at their default
        group, _, leaf = dotted.partition(".")
        node = out.get(group)
        if group != "model" and isinstance(node, dict) and "." not in leaf and node.get(leaf, default) == default:
            node.pop(leaf, None)
    return out


def params_hash(params: dict, command: str | None = None) -> str:
    """Version 3 of the hash from a run's flattened params ({'model.name': 'svgp', ...}, values as
    strings; old names are read as ``canonical_params`` says); ``command='bias'`` for a ``gpdlm bias``
    run. Equals ``config_hash`` of the config the run logged."""
    return _hash({str(k): str(v) for k, v in canonical_params(params).items()}, command)


def _hash(items: dict, command: str | None) -> str:
    """SHA-256 (16 hex) of the result-determining part of flattened params (versions 2 and 3)."""
    if command == "bias":
        items[COMMAND_KEY] = "bias"
    bias = items.get(COMMAND_KEY) == "bias"
    kept = {k: v for k, v in items.items() if not _neutral(k, bias) and ADDED_KEYS.get(k) != v}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()[:16]


def _resolved(cfg) -> dict:
    """The resolved config as plain dicts and lists (a run's config is a mapping)."""
    from omegaconf import OmegaConf

    d = OmegaConf.to_container(cfg, resolve=True)
    if not isinstance(d, dict):
        raise TypeError(f"a run's config is a mapping, not {type(d).__name__}")
    return d


def config_hash(cfg, without: tuple[str, ...] = ()) -> str:
    """SHA-256 (16 hex) of what determines the result of a run of ``cfg`` (version 3, module
    docstring): two runs with the same hash trained the same thing, whatever the tracking target,
    output folder, thread count or device. ``without``: dotted keys also left out (``sweep.batched``
    groups jobs by the hash without seed and objective.beta)."""
    flat = _flatten(_resolved(cfg))
    for dotted in without:
        flat = {k: v for k, v in flat.items() if k != dotted and not k.startswith(dotted + ".")}
    return params_hash({k: _param_str(v) for k, v in flat.items()})


def _version_2_hash(config: dict) -> str:
    """Version 2 of the hash of a (version-3) resolved config: hashed in the old shape and old names."""
    flat = _flatten(_as_version_2(config))
    return _hash({k: _param_str(v) for k, v in flat.items()}, None)


def legacy_config_hash(cfg) -> str:
    """Version 1 of the hash (gpdlm before ``gpdlm.config_hash_version``): the resolved config, in
    version 2's shape, without ``IGNORED_KEYS`` only. Kept to find the runs of existing stores."""
    d = _as_version_2(_resolved(cfg))
    for k in IGNORED_KEYS:
        d.pop(k, None)
    return hashlib.sha256(json.dumps(d, sort_keys=True, default=str).encode()).hexdigest()[:16]


def config_hashes(cfg) -> tuple[str, str, str]:
    """(version 3, version 2, version 1) of ``cfg``'s hash: a FINISHED run (or a checkpoint) tagged
    with any of them is this config's."""
    return config_hash(cfg), _version_2_hash(_resolved(cfg)), legacy_config_hash(cfg)


def run_identity(params: dict, tags: dict) -> str | None:
    """The version-3 hash of a logged run: its ``gpdlm.config_hash`` tag when the run carries
    version 3, else recomputed from its params (runs of older stores, their old names read as
    ``canonical_params`` says); None without the tag."""
    h = tags.get("gpdlm.config_hash")
    if not h:
        return None
    if tags.get(VERSION_TAG) == VERSION:
        return h
    return params_hash(params, tags.get("gpdlm.command"))
