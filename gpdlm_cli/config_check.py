"""Unknown config options as one line with the closest valid names, before Hydra runs anything.

Hydra answers ``model=nosuch`` or ``objective.betta=1`` with a 17-52 line message and exit code 1;
gpdlm promises ``gpdlm: error: ...`` (one line, exit 2). ``check_overrides`` parses the command
line's overrides with Hydra's own parser, checks every config-group choice (every value of a sweep
``model=dlm,nosuch`` too) against the group's options, composes the first job's config with the
compose API and turns an unknown key into the same kind of line:

    gpdlm: error: unknown model 'dlmm'; did you mean 'dlm'? (choose from: dlm, dlm_fixed, ...)
    gpdlm: error: unknown config key 'objective.betta'; did you mean 'objective.beta'?

Anything else (a parse error, a type error) is left to Hydra and gpdlm's own validation.
"""

from __future__ import annotations

import difflib

from .exceptions import ConfigError

# Hydra flags after which no override check makes sense
HELP_FLAGS = {"-h", "--help", "--hydra-help", "-i", "--info", "-sc", "--shell-completion"}
VALUE_FLAGS = {"-cn", "--config-name", "-cp", "--config-path", "-cd", "--config-dir", "-p", "--package",
               "-c", "--cfg", "--experimental-rerun"}
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


def _suggest(what: str, value: str, options: list[str], more: str = "") -> str:
    close = difflib.get_close_matches(value, options, n=3, cutoff=0.5)
    msg = f"unknown {what} '{value}'"
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

    return list(flatten(OmegaConf.to_container(cfg, resolve=False)))


def check_overrides(argv: list[str]) -> str | None:
    """The one-line message for the first unknown group option or config key in ``argv``, else
    None (also when the check itself cannot decide: Hydra reports those cases)."""
    args = override_args(argv)
    if not args:
        return None
    from hydra import compose, initialize_config_module
    from hydra.core.global_hydra import GlobalHydra
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import ConfigCompositionException, MissingConfigException

    try:
        parsed = OverridesParser.create().parse_overrides(args)
    except Exception:
        return None
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        loader = GlobalHydra.instance().config_loader()
        first, later = [], []  # overrides of the first job; keys to look up afterwards
        for o in parsed:
            if o.is_delete():
                continue
            key = o.key_or_group
            options = loader.get_group_options(key)
            if options:
                values = _group_values(o)
                for v in values:
                    if v not in options and v != "null":
                        more = "; `gpdlm datasets list` shows them" if key == "dataset" else ""
                        return _suggest(key, v, options, more)
                if values and not key.startswith("hydra"):
                    first.append(f"{o.get_key_element()}={values[0]}")
                continue
            if key.startswith("hydra.") or key.startswith("hydra/"):
                continue
            if not o.is_sweep_override():
                first.append(o.input_line)
            elif o.is_discrete_sweep():
                first.append(f"{o.get_key_element()}={next(iter(o.sweep_string_iterator()))}")
            elif not o.is_add() and not o.is_force_add():
                later.append(key)
        try:
            cfg = compose(config_name="config", overrides=first)
        except MissingConfigException:
            return None
        except ConfigCompositionException as e:
            text = str(e)
            if "Could not override '" not in text:
                return None
            key = text.split("Could not override '", 1)[1].split("'", 1)[0]
            try:
                base = compose(config_name="config", overrides=[f for f in first if not f.lstrip("+~").startswith(key)])
            except Exception:
                return None
            return _unknown_key(key, _flat_keys(base))
        except Exception:
            return None
        from omegaconf import OmegaConf

        for key in later:
            if OmegaConf.select(cfg, key, default="__gpdlm_missing__") == "__gpdlm_missing__":
                return _unknown_key(key, _flat_keys(cfg))
    return None


def _unknown_key(key: str, known: list[str]) -> str:
    close = difflib.get_close_matches(key, known, n=3, cutoff=0.8)
    msg = f"unknown config key '{key}'"
    if close:
        msg += "; did you mean " + " or ".join(f"'{c}'" for c in close) + "?"
    return msg + f" (a new key needs a leading '+': +{key}=...)"


def raise_for_overrides(argv: list[str]) -> None:
    """``check_overrides`` as a ConfigError."""
    msg = check_overrides(argv)
    if msg:
        raise ConfigError(msg)
