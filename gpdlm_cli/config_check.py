"""Bad overrides as one line, before Hydra runs anything (and so before it makes a run folder).

Hydra answers ``model=nosuch`` or ``objective.betta=1`` with a 17-52 line message and exit code 1;
gpdlm promises ``gpdlm: error: ...`` (one line, exit 2). ``check_overrides`` parses the command
line's overrides with Hydra's own parser, checks every config-group choice (every value of a sweep
``model=dlm,nosuch`` too) against the group's options, composes the config of those choices (once
per set of choices: ``composed``) and checks every value override against it:

* an unknown key, with the closest names;
* the config schema's type and range rules (``check_value``: a key's rule in ``gpdlm_cli.schema``, or,
  for the trainer's and the model families' keys, whose schemas import torch, the type of its default;
  no nan/inf anywhere, no negative number), every value of a sweep;
* for a single run, ``build.validate_config`` (the model family's exact ranges) on the config the
  overrides give.
* a key that config-hash version 3 renamed (``trainer.algorithm``), an unknown key (``trainer.max_iter``) or
  group option, also swept under ``hydra.sweeper.params`` by an experiment preset or the command line
  (``_swept_params``).

    gpdlm: error: unknown model 'dlmm'; did you mean 'dlm'? (choose from: dlm, dlm_fixed, ...)
    gpdlm: error: unknown config key 'objective.betta'; did you mean 'objective.beta'?
    gpdlm: error: the 'lr' parameter of trainer must be a finite number (no nan or inf); got inf instead

What needs the data (sizes, columns) is checked by the run itself, still before any training.
"""

from __future__ import annotations

import contextlib
import difflib
import functools
import math
from pathlib import Path
from typing import Any, cast

# Hydra flags after which no override check makes sense
HELP_FLAGS = {"-h", "--help", "--hydra-help", "-i", "--info", "-sc", "--shell-completion"}
VALUE_FLAGS = {
    "-cn",
    "--config-name",
    "-cp",
    "--config-path",
    "-cd",
    "--config-dir",
    "-p",
    "--package",
    "-c",
    "--cfg",
    "--experimental-rerun",
}
MAX_LISTED = 30  # model (22 options) is listed; dataset (47) points to `gpdlm datasets list`


def override_args(argv: list[str]) -> list[str] | None:
    """The override arguments of a Hydra command line (None when it asks for help)."""
    out, skip = [], False
    for a in argv:
        if skip:
            skip = False
            continue
        if a in HELP_FLAGS:
            return None
        if a in VALUE_FLAGS:
            skip = True
            continue
        if not a.startswith("-") and "=" in a:
            out.append(a)
    return out


def _suggest(what: str, value: str, options: list[str], more: str = "", where: str = "") -> str:
    close = difflib.get_close_matches(value, options, n=3, cutoff=0.5)
    msg = f"unknown {what} '{value}'{where}"
    if close:
        msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    if len(options) <= MAX_LISTED:
        msg += f" (choose from: {', '.join(options)})"
    else:
        msg += f" ({len(options)} options{more})"
    return msg


def _group_values(o) -> list[str]:
    if o.is_sweep_override():
        return list(o.sweep_string_iterator()) if o.is_discrete_sweep() else []
    v = o.get_value_element_as_str()
    return [] if v is None else [v]


def _flat_keys(cfg) -> list[str]:
    from omegaconf import OmegaConf

    from .tracking import flatten

    return list(flatten(cast(dict, OmegaConf.to_container(cfg, resolve=False))))  # a DictConfig's container


def check_overrides(argv: list[str], command: str = "train") -> str | None:
    """The one-line message for the first bad override in ``argv``, else None (also when the check
    itself cannot decide: Hydra and gpdlm's own validation report those cases). Bad: an unknown
    group option or config key; a value of the wrong type for its key (``check_value``, every
    value of a sweep); a single run's config that ``build.validate_config`` rejects (and, for
    ``command='bias'``, ``validate_bias``) -- not a multirun's, whose launcher must not import
    torch: each job validates its own; a multirun's ``sweep.batched`` / ``warm_start`` with a parallel
    launcher (``_launcher``)."""
    args = override_args(argv)
    if args is None:
        return None
    shadowed = shadowing_config(argv)
    if shadowed or not args:
        return shadowed
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .sweep.compose import config_module, missing_folder, searchpath_of, user_searchpath
    from .tracking.identity import renamed_message

    # the user's own config folders: the command's -cd DIR and hydra.searchpath=[...] (cli: use_searchpath), argv's
    searchpath = tuple(dict.fromkeys((*user_searchpath(), *searchpath_of(argv))))
    missing = missing_folder(searchpath)
    if missing:
        return f"config folder '{missing}' (on the config search path: -cd / hydra.searchpath) does not exist"
    groups, values, later = [], [], []  # the first job's group choices; value overrides; keys to look up
    hydra_args: list[str] = []  # overrides of Hydra's own config (hydra.sweeper.params=..., hydra/sweeper=...)
    with config_module(searchpath):
        loader = GlobalHydra.instance().config_loader()
        try:  # with the config loader: glob(...) expands to a group's options
            parsed = OverridesParser.create(config_loader=loader).parse_overrides(args)
        except Exception:
            return None
        for o in parsed:
            if o.is_delete():
                continue
            key = o.key_or_group
            options = _group_options(loader, key, searchpath)
            if options:
                choices = _group_values(o)
                message = _bad_group_choice(loader, o, options, choices, searchpath)
                if message:
                    return message
                if choices and not key.startswith("hydra"):
                    groups.append(f"{o.get_key_element()}={choices[0]}")
                continue
            if key.startswith("hydra.") or key.startswith("hydra/"):
                # hydra.sweeper.params.trainer.algorithm=full,delayed: Hydra refuses a sweep of its own
                # config in a page; the sweep callback reports the other forms (a preset's params too)
                swept = key.removeprefix("hydra.sweeper.params.") if key.startswith("hydra.sweeper.params.") else ""
                if renamed_message(swept.lstrip("+~")):
                    return renamed_message(swept.lstrip("+~"), str(o.input_line).split("=", 1)[1])
                hydra_args.append(str(o.input_line))
                continue
            if not o.is_sweep_override() or o.is_discrete_sweep():
                values.append(o)
            elif not o.is_add() and not o.is_force_add():
                later.append(key)
    base, message = _base_config(tuple(groups), searchpath)
    if base is None:
        return message
    multirun = any(a in ("-m", "--multirun") for a in argv)
    return (
        _check_values(base, values, later, None if multirun else command)
        or _launcher(base, values, parsed, multirun)
        or _sweep_kind(parsed)
        or _swept_params(tuple(groups), tuple(hydra_args), searchpath, tuple(args))
    ) or _finished_from(base, values)


def _launcher(base, values, parsed, multirun: bool) -> str | None:
    """``sweep.callback.sweep_launcher_conflict`` of a multirun's command line: its ``hydra/launcher=`` choice (a
    launcher a preset chooses is checked by each job) and the sweep keys as the command line and the preset set
    them."""
    from omegaconf import OmegaConf

    from .sweep.callback import sweep_launcher_conflict

    launchers = [v for o in parsed if o.key_or_group == "hydra/launcher" for v in _group_values(o)]
    if not multirun or not launchers or launchers[-1] == "basic":
        return None
    chosen = {o.key_or_group: _override_values(o) for o in values}

    def flag(key: str) -> bool:
        if key in chosen:
            return any(str(v).lower() == "true" for v in chosen[key])
        return bool(OmegaConf.select(base, key, default=False))

    return sweep_launcher_conflict(False, flag("sweep.batched"), flag("sweep.warm_start"))


def _bad_group_choice(loader, o, options: list[str], choices: list[str], searchpath) -> str | None:
    """The one-line message for a group override ``o`` (``dataset=...``, ``model=a,b``) whose sweep matches no
    option or whose value is no option of the group (nor of a sub-folder: ``experiment/rkhs_arm/...``), else None."""
    key = o.key_or_group
    if o.is_sweep_override() and o.is_discrete_sweep() and not choices:
        listed = f"choose from: {', '.join(options)}" if len(options) <= MAX_LISTED else f"{len(options)} options"
        return f"'{o.input_line}' matches no {key} option ({listed}){_looked_in(loader)}"
    for v in choices:
        if v in options or v == "null":
            continue
        nested = _sub_folder_options(loader, key, v, searchpath)  # experiment/rkhs_arm/...
        if v in nested:
            continue
        if nested:
            return _suggest(key, v, nested) + _looked_in(loader)
        more = "; `gpdlm datasets list` shows them" if key == "dataset" else ""
        return _suggest(key, v, options, more) + _looked_in(loader)
    return None


def _finished_from(base, values) -> str | None:
    """``sweep.finished_from``'s run-records files read and verified (``tracking.records_file``), each with
    runs of the experiment the sweep tracks into: a missing, changed or foreign file before any job."""
    from omegaconf import OmegaConf

    given = {o.key_or_group: _override_values(o) for o in values}
    paths = (given.get("sweep.finished_from") or [None])[0]
    if not paths:
        return None
    experiment = (given.get("tracking.experiment") or [OmegaConf.select(base, "tracking.experiment")])[0]
    from .exceptions import GpdlmError
    from .tracking.records_file import finished_config_hashes

    try:
        finished_config_hashes([str(p) for p in (paths if isinstance(paths, list) else [paths])], str(experiment))
    except GpdlmError as e:
        return str(e).splitlines()[0]
    return None


def user_config_folders(argv: list[str]) -> list[Path]:
    """The user's config folders of a Hydra command line, in Hydra's order: ``GPDLM_CONFIG_PATH``'s, then
    ``-cd DIR``'s and ``hydra.searchpath=[...]``'s (``file://`` folders and ``pkg://`` packages), those that
    exist."""
    import importlib.util
    import os

    folders = [Path(os.path.abspath(p)) for p in os.environ.get("GPDLM_CONFIG_PATH", "").split(os.pathsep) if p.strip()]
    if any(a in ("-cd", "--config-dir") or a.startswith(("--config-dir=", "hydra.searchpath=")) for a in argv):
        from .sweep.compose import searchpath_of

        for entry in searchpath_of(argv):
            if entry.startswith("file://"):
                folders.append(Path(os.path.abspath(entry.removeprefix("file://"))))
            elif entry.startswith("pkg://"):
                try:
                    spec = importlib.util.find_spec(entry.removeprefix("pkg://").replace("/", "."))
                except (ImportError, ValueError):
                    continue
                if spec is not None:  # a package that does not exist: Hydra reports it
                    folders.extend(Path(p) for p in (spec.submodule_search_locations or []))
    return [f for f in dict.fromkeys(folders) if f.is_dir()]


def shadowing_config(argv: list[str]) -> str | None:
    """One line for a config file in the user's folders (``user_config_folders``) with the name of one of
    gpdlm's packaged configs (``myconf/experiment/pol_fast.yaml`` against ``experiment/pol_fast.yaml``):
    the packaged configs come first on Hydra's search path, so the user's file would be ignored without
    a word. The first such file (folders in order, names sorted), else None. Looks up each packaged
    name in each folder (~300 file checks), never walks the user's folder (``-cd .`` may hold thousands
    of run folders)."""
    folders = user_config_folders(argv)
    if not folders:
        return None
    packaged = (Path(__file__).resolve().parent / "conf").resolve()
    names = sorted(p.relative_to(packaged) for p in packaged.rglob("*.yaml"))
    for folder in folders:
        if folder.resolve() == packaged:
            continue
        for rel in names:
            if (folder / rel).is_file():
                mine = rel.parent.joinpath("my_" + rel.name).as_posix()
                return (
                    f"your config {folder / rel} has the name of gpdlm's packaged {rel.with_suffix('').as_posix()} "
                    f"({packaged / rel}), which Hydra would use instead of yours: rename yours (e.g. {mine})"
                )
    return None


def _base_config(groups: tuple[str, ...], searchpath: tuple[str, ...]):
    """``(config, None)``: the config of the first job's group choices; or ``(None, message)``: the one line for
    an override of a key no config has (``Could not override 'model.foo'``), ``(None, None)`` where Hydra
    reports the problem itself (a missing config, another composition error)."""
    from hydra.errors import ConfigCompositionException, MissingConfigException

    try:
        return composed(groups, searchpath), None
    except MissingConfigException:
        return None, None
    except ConfigCompositionException as e:
        text = str(e)
        if "Could not override '" not in text:
            return None, None
        key = text.split("Could not override '", 1)[1].split("'", 1)[0]
        try:
            known = composed(tuple(g for g in groups if not g.lstrip("+~").startswith(key)), searchpath)
        except Exception:
            return None, None
        return None, _unknown_key(key, _flat_keys(known))
    except Exception:
        return None, None


def _sweep_kind(parsed) -> str | None:
    """One line for a sampled range (``interval(...)``, or a ``tag(...)`` of one) where the sweeper
    runs lists (Hydra's basic sweeper and gpdlm's take ``a,b``, ``range``, ``choice``, ``glob``,
    ``sort``, ``shuffle``): Hydra would stop the sweep with its sweeper's class name. Left to Hydra
    when the command line chooses a sweeper or an experiment preset (which may choose one)."""
    chosen = [o for o in parsed if o.key_or_group.lstrip("+~").startswith(("hydra/sweeper", "experiment"))]
    for o in parsed:
        if (
            o.is_sweep_override()
            and not o.is_discrete_sweep()
            and not chosen
            and not o.key_or_group.startswith("hydra")
        ):
            return (
                f"'{o.input_line}' is a sampled range, which the default sweeper cannot run: sweep a list "
                "(a,b / range(0,1,step=0.25) / choice(a,b)) or sample it with hydra/sweeper=optuna"
            )
    return None


def _swept_params(groups: tuple[str, ...], hydra_args: tuple[str, ...], searchpath=(), args=()) -> str | None:
    """One line for a bad key in the sweeper's ``hydra.sweeper.params`` of the first job's config (an experiment
    preset's, or the command line's ``hydra.sweeper.params={trainer.algorithm:'full,delayed'}``): a key that
    config-hash version 3 renamed (``trainer.algorithm``), an unknown group option or an unknown key
    (``_swept_unknown``). Hydra would stop with "Could not override 'trainer.algorithm'" only after the
    sweep's folder and MLflow parent run exist, and a ``++trainer.<key>`` would fail every job. Composed
    (with Hydra's config, ~0.2 s) only when a preset is chosen or the command line overrides Hydra's
    config: conf/config.yaml sweeps nothing. ``args``: the command line's overrides."""
    if not hydra_args and not any(g.lstrip("+~").startswith("experiment") for g in groups):
        return None
    from hydra import compose
    from omegaconf import OmegaConf

    from .sweep.compose import config_module
    from .tracking.identity import renamed_sweep_param

    try:
        with config_module(searchpath):
            cfg = compose(config_name="config", overrides=[*groups, *hydra_args], return_hydra_config=True)
    except Exception:  # Hydra reports what it cannot compose
        return None
    params = cfg.hydra.sweeper.get("params")  # a mapping, or null (no sweeper params)
    plain = OmegaConf.to_container(params, resolve=False) if OmegaConf.is_config(params) else None
    plain = plain if isinstance(plain, dict) else None
    return renamed_sweep_param(plain) or _swept_unknown(_dotted(plain or {}), args, searchpath, cfg)


def _dotted(params: dict, prefix: str = "") -> dict[str, Any]:
    """A sweeper's params with nested dicts read as dotted keys (``+hydra.sweeper.params.trainer.lr=...`` nests)."""
    out: dict[str, Any] = {}
    for k, v in params.items():
        if isinstance(v, dict):
            out.update(_dotted(v, f"{prefix}{k}."))
        else:
            out[f"{prefix}{k}"] = v
    return out


MAX_SWEPT_CONFIGS = 64  # group-choice combinations composed to look for a swept key (~0.1 s each)
WHERE_SWEPT = " under hydra.sweeper.params"


def _swept_unknown(params: dict[str, Any], args=(), searchpath=(), cfg=None) -> str | None:
    """One line for an unknown option of a config group (``model: svgp,nosuch``) or an unknown key
    (``trainer.max_iter: 1,2``) in a sweeper's ``params`` ({dotted key: the values, as override text}).
    A key counts as unknown when no job's config has it: the configs of the sweep's group choices (the
    params' and the command line's ``args``; the command line's win) are composed one by one, up to
    ``MAX_SWEPT_CONFIGS``, until every key is found (a key most presets set costs one cached compose).
    Added (``+``/``++``), deleted (``~``) and ``hydra.`` keys are left to Hydra, and so is a key that only
    some jobs' configs have (those jobs fail with their one line). ``cfg``: a config already composed of the
    command line's first choices (no compose at all when it has every key)."""
    import itertools

    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from .sweep.compose import config_module

    choices: dict[str, tuple[str, list[str]]] = {}  # group -> (its key with a +/~ prefix, the values swept)
    keys = []  # value keys to find
    with config_module(searchpath):
        loader = GlobalHydra.instance().config_loader()
        parser = OverridesParser.create(config_loader=loader)
        params_lines = [f"{k}={v}" for k, v in params.items()]
        for i, line in enumerate([*params_lines, *args]):
            try:
                o = parser.parse_override(line)
            except Exception:  # Hydra reports what it cannot parse
                return None
            key, in_params = o.key_or_group, i < len(params_lines)
            if o.is_delete() or key.startswith("hydra"):
                continue
            options = _group_options(loader, key, searchpath)
            if options:
                values = _group_values(o)
                bad = [v for v in values if v not in options and v != "null"]
                if bad and in_params:
                    return _suggest(key, bad[0], options, where=WHERE_SWEPT) + _looked_in(loader)
                choices[key] = (o.get_key_element(), values)  # the command line's replaces the params'
            elif in_params and not o.is_add() and not o.is_force_add():
                keys.append(key)
    keys = [k for k in keys if cfg is None or _select(cfg, k) is MISSING]
    if not keys:
        return None
    combos = itertools.product(*([f"{g}={v}" for v in vals] for g, vals in choices.values() if vals))
    first: list[str] = []
    for combo in itertools.islice(combos, MAX_SWEPT_CONFIGS):
        try:
            cfg = composed(tuple(combo), searchpath)
        except Exception:  # a combination Hydra cannot compose: its jobs report it
            continue
        keys = [k for k in keys if _select(cfg, k) is MISSING]
        if not keys:
            return None
        first = first or _flat_keys(cfg)
    if not first:
        return None
    if next(combos, None) is not None:  # more combinations than were composed: the key may be in one of them
        return None
    return _unknown_key(keys[0], first, where=WHERE_SWEPT)


def _select(cfg, key: str):
    """``cfg``'s value at dotted ``key``, or ``MISSING`` where it has no such key."""
    from omegaconf import OmegaConf

    try:
        return OmegaConf.select(cfg, key, default=MISSING, throw_on_missing=False)
    except Exception:  # a key through a non-container value (model.name.x)
        return MISSING


MISSING = "__gpdlm_missing__"
_OPTIONS: dict[tuple[str, tuple[str, ...]], list[str]] = {}


def _group_options(loader, key: str, searchpath: tuple[str, ...] = ()) -> list[str]:
    """The options of config group ``key`` (none for a plain key) in every folder of the loader's
    search path (gpdlm's packaged configs, ``GPDLM_CONFIG_PATH``'s folders and ``searchpath``, which
    the loader already holds: it is part of the memo's key), memoised: Hydra scans the folders on every
    call (~50 ms)."""
    import os

    memo = (key, (*searchpath, os.environ.get("GPDLM_CONFIG_PATH", "")))
    if memo not in _OPTIONS:
        _OPTIONS[memo] = loader.get_group_options(key)
    return _OPTIONS[memo]


def _sub_folder_options(loader, key: str, value: str, searchpath: tuple[str, ...] = ()) -> list[str]:
    """The options of the sub-folder of group ``key`` that ``value`` names, as ``sub/name``
    (``+experiment=rkhs_arm/scgd_rff``: conf/experiment/rkhs_arm/, which Hydra composes as the group's
    options); none for a value without a folder."""
    sub = value.rpartition("/")[0]
    return [f"{sub}/{n}" for n in _group_options(loader, f"{key}/{sub}", searchpath)] if sub else []


def _looked_in(loader) -> str:
    """'' with only gpdlm's packaged configs on the search path, else where the options were looked
    for: "; looked in gpdlm's packaged configs and file:///home/me/myconf"."""
    user = [str(s.path) for s in loader.get_sources() if s.provider not in ("hydra", "main", "schema")]
    return f"; looked in gpdlm's packaged configs and {', '.join(user)}" if user else ""


def composed(groups: tuple[str, ...], searchpath: tuple[str, ...] = ()):
    """The composed config for these group choices (``model=svgp``, ``+experiment=...``) and no
    value overrides: the defaults every value override replaces, with ``searchpath`` (the user's own
    config folders, ``sweep.compose.searchpath_of``) and ``GPDLM_CONFIG_PATH``'s on Hydra's search
    path. Cached (a compose costs ~0.1-0.3 s)."""
    import os

    return _composed(groups, searchpath, os.environ.get("GPDLM_CONFIG_PATH", ""))


@functools.lru_cache(maxsize=32)
def _composed(groups: tuple[str, ...], searchpath: tuple[str, ...], env: str):
    """``composed``, cached per search path (``env``: GPDLM_CONFIG_PATH, which the search-path plugin reads)."""
    from hydra import compose

    from .sweep.compose import config_module

    with config_module(searchpath):
        return compose(config_name="config", overrides=list(groups))


def _override_values(o) -> list:
    """The values an override sets: one, or each value of a discrete sweep (``a=1,2``, ``choice``)."""
    if not o.is_sweep_override():
        return [o.value()]
    sweep = o.value()
    return list(getattr(sweep, "list", None) or [])


def _check_values(base, values, later, command: str | None = "train") -> str | None:
    from omegaconf import OmegaConf

    from .tracking.identity import RENAMED

    first: list[tuple[str, Any]] = []  # (key, value) of the first job
    checked: list[tuple[str, Any, Any]] = []  # (key, default, value) of every job
    for o in values:
        key, added = o.key_or_group, o.is_add() or o.is_force_add()
        default = OmegaConf.select(base, key, default=MISSING)
        vals = _override_values(o)
        if default is MISSING and (not added or key in RENAMED):  # `+trainer.algorithm=...` is an old name too
            return _unknown_key(key, _flat_keys(base), vals[0] if len(vals) == 1 else ...)
        if not added:
            if OmegaConf.is_config(default):
                default = OmegaConf.to_container(default, resolve=False)
            checked.extend((key, default, v) for v in vals)
        if vals:
            first.append((key, vals[0]))
    for key in later:
        if OmegaConf.select(base, key, default=MISSING) == MISSING:
            return _unknown_key(key, _flat_keys(base))
    model = {g: base[g].get("name") for g in ("model", "dataset", "estimator", "kernel") if g in base}
    for key, default, v in checked:  # types first: the validators may trip over a wrong type
        message = check_value(key, default, v, model=model, ranges=False)
        if message:
            return message
    if command is not None:  # a single run; a multirun's launcher never imports torch (its jobs validate)
        with _applied(base, first) as cfg:
            message = _validate(cfg, command)  # the families' exact ranges
        if message:
            return message
    for key, default, v in checked:  # the schema's range (>= 0) for keys no validator covers
        message = check_value(key, default, v, model=model)
        if message:
            return message
    return None


@contextlib.contextmanager
def _applied(cfg, updates):
    """``cfg`` with ``updates`` [(key, value)] applied, restored afterwards (``cfg`` is the cached
    composed config: cheaper than a copy, ~40 ms)."""
    from omegaconf import OmegaConf

    saved = []
    struct = OmegaConf.is_struct(cfg)
    OmegaConf.set_struct(cfg, False)
    try:
        for key, value in updates:
            old = OmegaConf.select(cfg, key, default=MISSING, throw_on_missing=False)
            saved.append((key, OmegaConf.to_container(old) if OmegaConf.is_config(old) else old))
            OmegaConf.update(cfg, key, value, merge=False, force_add=True)
        yield cfg
    finally:
        for key, old in reversed(saved):
            if old is MISSING:
                parent, _, leaf = key.rpartition(".")
                node = OmegaConf.select(cfg, parent) if parent else cfg
                if node is not None and leaf in node:
                    del node[leaf]
            else:
                OmegaConf.update(cfg, key, old, merge=False, force_add=True)
        OmegaConf.set_struct(cfg, struct)


def _validate(cfg, command: str = "train") -> str | None:
    """``build.validate_config`` on the first job's config: a range error from any family's
    validator, before Hydra makes a run folder (None when it passes or cannot tell)."""
    from .exceptions import GpdlmError

    try:
        from . import build

        build.validate_config(cfg)
        if command == "bias":
            from .run.bias import validate_bias

            validate_bias(cfg)
    except GpdlmError as e:
        return str(e).splitlines()[0]
    except Exception:  # a value the validators trip over: the run reports it
        return None
    return None


def _owner(key: str, model: str | dict | None) -> tuple[str, str]:
    """('lr', 'trainer') for 'trainer.lr'; ('seed', 'gpdlm') for 'seed'; the keys of a group named in
    ``model`` (the model's name, or {group: its chosen name}) name the choice, as the schema's messages
    do: ('lag', 'dataset=chicago')."""
    owner, _, param = key.rpartition(".")
    names = model if isinstance(model, dict) else {"model": model}
    if names.get(owner):
        owner = f"{owner}={names[owner]}"
    return param, owner or "gpdlm"


NAME_LIMITS = {"tracking.experiment": 500}  # MLflow's MAX_EXPERIMENT_NAME_LENGTH


def check_value(key: str, default, value, model: str | dict | None = None, ranges: bool = True) -> str | None:
    """The config schema's type and range rules for one value (None when it passes): the key's
    ``Rule`` in ``gpdlm_cli.schema`` where the schema has one without importing torch (every group
    but ``trainer`` and the model families' own keys; ``model`` names the chosen model, or gives
    {group: chosen name} for the estimator's and the dataset loader's options), with the schema's
    message; then (as for every other key) the composed config's default says the key's type:

    * a key whose default is true/false takes true or false;
    * a key whose default is an integer takes an integer >= 0 (no integer key of gpdlm is negative;
      the families' validators narrow the range further);
    * a key whose default is a float takes a finite number >= 0 (no float key of gpdlm is negative);
    * a list key takes a list; every number anywhere must be finite (no nan, no inf);
    * null is left to the key's validator (it switches some options off, e.g. trainer.max_iters
      when trainer.max_epochs is set).

    Keys whose default is a string or null take other types too (``threads: auto`` or an integer,
    ``trainer.lr: null`` or a float): their validators check them. ``ranges=False``: the type
    rules only (non-finite numbers included)."""
    from .exceptions import param_error

    param, owner = _owner(key, model)

    def bad(allowed: str) -> str:
        return str(param_error(param, owner, allowed, value))

    if _non_finite(value):
        return bad("a finite number (no nan or inf)" if isinstance(value, float) else "free of nan and inf")
    limit = NAME_LIMITS.get(key)
    if limit is not None and isinstance(value, str) and len(value) > limit:  # MLflow's own error blamed the store
        return str(
            param_error(
                param,
                owner,
                f"at most {limit} characters long (MLflow's limit)",
                f"{value[:20]}... ({len(value)} characters)",
            )
        )
    names = model if isinstance(model, dict) else {"model": model}
    found = _schema_rule(key, names)
    if found is not None and not found[0].accepts(value):  # the schema's rule (type, range, choices, null)
        rule, where = found
        return str(param_error(param, where, rule.describe(), value))
    # and the rules of the default's type (a schema rule that leaves a range to a validator: kernel.lengthscale)
    if value is None:  # null switches an option off where a key allows it (trainer.max_iters with max_epochs)
        return None
    if isinstance(default, bool):
        return None if isinstance(value, bool) else bad("true or false")
    if isinstance(default, int):
        if isinstance(value, bool) or not isinstance(value, int):
            return bad("an integer")
        return bad("an integer >= 0") if ranges and value < 0 else None
    if isinstance(default, float):
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return bad("a number")
        return bad("a finite number >= 0") if ranges and value < 0 else None
    if isinstance(default, list) and not isinstance(value, list):
        return bad("a list, e.g. [1, 2]")
    return None


def _schema_rule(key: str, names: dict):
    """(Rule, owner) of ``key`` from the config schema where it has one without importing torch
    (``schema.rule_of_key``: every group but ``trainer`` and the families' model keys), else None."""
    from .schema import rule_of_key

    try:
        return rule_of_key(key, {g: n for g, n in names.items() if isinstance(n, str)})
    except Exception:  # the registry cannot be read: the run reports it
        return None


def _non_finite(value) -> bool:
    if isinstance(value, float):
        return not math.isfinite(value)
    if isinstance(value, (list, tuple)):
        return any(_non_finite(v) for v in value)
    if isinstance(value, dict):
        return any(_non_finite(v) for v in value.values())
    return False


def _unknown_key(key: str, known: list[str], value=..., where: str = "") -> str:
    from .tracking.identity import renamed_message

    renamed = renamed_message(key.lstrip("+~"), value)
    if renamed:
        return renamed
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.8)
    msg = f"unknown config key '{key}'{where}"
    if close:
        msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return msg + f" (a new key needs a leading '+': +{key}=...)"
