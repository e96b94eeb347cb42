"""Write docs/configuration.md from gpdlm's composed Hydra configs, so the page cannot drift.

    python tools/config_docs.py            # rewrite docs/configuration.md
    python tools/config_docs.py --check    # exit 1 if the committed page differs from what this writes

What comes from where:

* the **defaults** of every key (and which option of a config group sets which value) come from Hydra
  composing ``gpdlm_cli/conf/config.yaml`` once per option of every config group (``model=svgp``,
  ``trainer=fast``, ...), exactly as ``gpdlm train`` composes them;
* the **comments** of the per-option tables are the inline ``# ...`` comments of the YAML files;
* the **meanings** of the key reference are ``tools/config_keys.yaml`` (hand-written prose); a key
  listed there that no composed config has is an error, so a renamed or removed key fails the
  test (``tests/test_docs.py``) until its entry is fixed;
* the **schema** tables (types, what each key allows, help) come from the config schema itself
  (``gpdlm_cli.schema``: every group's dataclass, and each model family's ``Spec``), the same rules
  that check a run's values and word its errors;
* the **presets** and **datasets** lists are the option files of ``experiment/`` and ``dataset/`` with
  the first line of their header comment.

The page is plain Markdown (``|`` inside cells escaped), deterministic (sorted options, no dates).
"""

from __future__ import annotations

import argparse
import re
import sys
from collections import OrderedDict
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
CONF = ROOT / "gpdlm_cli" / "conf"
KEYS_FILE = ROOT / "tools" / "config_keys.yaml"
PAGE = ROOT / "docs" / "configuration.md"

#: the config groups documented option by option (dataset/ and experiment/ are listed, not expanded)
GROUPS = ("model", "trainer", "likelihood", "estimator", "kernel", "features", "tracking")
#: top-level keys that are not a group's subtree
TOP_LEVEL = ("seed", "device", "dtype", "progress", "threads", "objective", "sweep", "bias")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml") if not p.stem.startswith("_"))


def _compose(overrides: list[str]):
    from hydra import compose

    return compose(config_name="config", overrides=overrides, return_hydra_config=True)


def _flatten(node, prefix: str) -> OrderedDict[str, object]:
    from omegaconf import DictConfig, OmegaConf

    out: OrderedDict[str, object] = OrderedDict()
    if isinstance(node, DictConfig):
        for key in node.keys():
            child = node._get_node(key)
            name = f"{prefix}.{key}" if prefix else str(key)
            if isinstance(child, DictConfig) and len(child) > 0:
                out.update(_flatten(child, name))
            else:
                value = (
                    OmegaConf.to_container(child, resolve=False) if isinstance(child, DictConfig) else child._value()
                )
                out[name] = value
    return out


def _fmt(value) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(_fmt(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k}: {_fmt(v)}" for k, v in value.items()) + "}"
    if isinstance(value, float):  # 1e-06 -> 1e-6, 1000000000000.0 -> 1e12; 0.0001, 1.0, 0.25 as written
        text = format(value, "g").replace("e+", "e").replace("e-0", "e-")
        return text if ("e" in text or "." in text) else f"{text}.0"
    return str(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _comments(path: Path) -> dict[str, str]:
    """``{dotted key: inline comment}`` of one YAML file (indentation gives the nesting; continuation
    comment lines, indented ``#`` lines right after a key, are appended)."""
    out: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    last = None
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            if last is not None and line.startswith(" " * 8) and stripped.startswith("#"):
                out[last] = (out.get(last, "") + " " + stripped.lstrip("#").strip()).strip()
            else:
                last = None
            continue
        m = re.match(r"^(\s*)([A-Za-z0-9_@/.\-]+):(.*)$", line)
        if not m or stripped.startswith("- "):
            last = None
            continue
        indent, key, rest = len(m.group(1)), m.group(2), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        stack.append((indent, key))
        comment = (
            rest.split(" #", 1)[1].strip()
            if " #" in rest
            else (rest.strip()[1:].strip() if rest.strip().startswith("#") else "")
        )
        if comment:
            out[dotted] = comment
            last = dotted
        else:
            last = None
    return out


def _header(path: Path) -> str:
    """The first line of a YAML file's header comment (after ``# @package``)."""
    for line in path.read_text().splitlines():
        s = line.strip()
        if not s.startswith("#"):
            break
        text = s.lstrip("#").strip()
        if text and not text.startswith("@package"):
            return text
    return ""


def collect():
    """Every composition the page needs: the default config, and per group and option that group's keys."""
    from hydra import initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        base = _compose([])
        choices = {g: base.hydra.runtime.choices.get(g) for g in (*GROUPS, "dataset")}
        top = OrderedDict()
        for key in TOP_LEVEL:
            top.update(_flatten(base[key], key) if hasattr(base[key], "keys") else {key: base[key]})
        groups: dict[str, dict[str, OrderedDict]] = {}
        for group in GROUPS:
            groups[group] = {}
            for option in _options(group):
                cfg = base if option == choices[group] else _compose([f"{group}={option}"])
                groups[group][option] = _flatten(cfg[group], group)
        dataset = _flatten(base["dataset"], "dataset")
    # dataset options are many (and cheap to read): their own YAML files, not composed
    groups["dataset"] = {}
    for path in sorted((CONF / "dataset").glob("*.yaml")):
        raw = yaml.safe_load(path.read_text()) or {}
        raw.pop("defaults", None)
        groups["dataset"][path.stem] = _flatten_plain(raw, "dataset")
    return choices, top, groups, dataset


def _flatten_plain(node: dict, prefix: str) -> OrderedDict[str, object]:
    out: OrderedDict[str, object] = OrderedDict()
    for key, value in node.items():
        name = f"{prefix}.{key}"
        if isinstance(value, dict) and value:
            out.update(_flatten_plain(value, name))
        else:
            out[name] = value
    return out


def _values_by_option(groups, key: str) -> OrderedDict[str, list[str]]:
    group = key.split(".", 1)[0]
    by_value: OrderedDict[str, list[str]] = OrderedDict()
    for option, flat in groups.get(group, {}).items():
        if key in flat:
            by_value.setdefault(_fmt(flat[key]), []).append(option)
    return by_value


def default_of(key: str, choices, top, groups, dataset) -> str | None:
    """The generated default of one dotted key, None when no composed config has it."""
    if key in choices and choices[key] is not None:
        return f"`{choices[key]}`"
    if key in top:
        return _fmt(top[key])
    if key in dataset and not key.startswith("dataset."):
        return _fmt(dataset[key])
    group = key.split(".", 1)[0]
    if group not in groups:
        return None
    by_value = _values_by_option(groups, key)
    if not by_value:
        return None
    default_option = choices[group]
    flat = groups[group].get(default_option, {})
    if key in flat:
        first = _fmt(flat[key])
    else:  # the most common value among the options that have the key
        first = max(by_value, key=lambda v: len(by_value[v]))
    rest = [f"{v} ({', '.join(opts)})" for v, opts in by_value.items() if v != first]
    total = len(groups[group])
    if key not in flat:
        owners = by_value[first]
        head = f"{first} ({', '.join(owners)})" if len(owners) < total else first
    else:
        head = first
    return "; ".join([head, *rest])


def render() -> str:
    spec = yaml.safe_load(KEYS_FILE.read_text())
    choices, top, groups, dataset = collect()
    lines = [
        "# Configuration",
        "",
        "<!-- GENERATED by `python tools/config_docs.py` from gpdlm_cli/conf and tools/config_keys.yaml: do not edit",
        "     by hand (tests/test_docs.py fails when this page and the configs disagree). -->",
        "",
        "Every key below is public interface: `gpdlm train key=value ...` (Hydra overrides; `+key=value` adds",
        "a key, `~key` deletes one). `gpdlm train --cfg job ...` prints the composed config of a command",
        "without running it, and `gpdlm train --help` lists the config groups.",
        "",
        "* [Key reference](#key-reference): what each key means, with its default",
        "* [Trainer keys](#trainer-keys)",
        "* [Schema](#schema-types-ranges-and-choices): every key's type and allowed values, as the checks apply them",
        "* [Options of each config group](#options-of-each-config-group): every option's keys and values",
        "* [Experiment presets](#experiment-presets) and [datasets](#datasets)",
        "",
        "The defaults are read from the composed configs: `a; b (x, y)` means `a` in the default option and `b`",
        "in the options `x`, `y`; a key only some options have lists them.",
        "",
    ]
    missing: list[str] = []

    def table(title: str, entries: list[dict]) -> None:
        lines.extend([f"## {title}", "", "| key | default | meaning |", "|---|---|---|"])
        for e in entries:
            keys = e["keys"]
            label = e.get("label") or " / ".join(f"`{k}`" for k in keys)
            if e.get("generated", True):
                defaults = []
                for k in keys:
                    d = default_of(k, choices, top, groups, dataset)
                    if d is None:
                        missing.append(k)
                        d = "?"
                    defaults.append(d)
                default = " / ".join(defaults)
            else:
                default = e.get("default", "")
            lines.append(f"| {_cell(label)} | {_cell(default)} | {_cell(e['meaning'])} |")
        lines.append("")

    table("Key reference", spec["config_keys"])
    table("Trainer keys", spec["trainer_keys"])
    if missing:
        raise SystemExit(f"tools/config_keys.yaml names keys no composed config has: {', '.join(missing)}")

    lines.extend(schema_section())
    lines.extend(
        [
            "## Options of each config group",
            "",
            "Each table is the group's subtree as `gpdlm train <group>=<option>` composes it; the comment is the",
            "one in the option's YAML file (`gpdlm_cli/conf/<group>/<option>.yaml`).",
            "",
        ]
    )
    for group in GROUPS:
        if group == "dataset":
            continue
        lines.extend(
            [
                f"### {group}",
                "",
                f"Default: `{group}={choices[group]}`. Options: " + ", ".join(f"`{o}`" for o in groups[group]) + ".",
                "",
            ]
        )
        group_comments: dict[str, str] = {}
        for path in sorted((CONF / group).glob("*.yaml")):
            for k, c in _comments(path).items():
                group_comments.setdefault(k, c)
        for option, flat in groups[group].items():
            path = CONF / group / f"{option}.yaml"
            own = _comments(path)
            lines.extend([f"#### {group}={option}", ""])
            head = _header(path)
            if head:
                lines.extend([_cell(head), ""])
            lines.extend(["| key | value | comment |", "|---|---|---|"])
            for key, value in flat.items():
                rel = key.split(".", 1)[1] if "." in key else key
                comment = own.get(rel, group_comments.get(rel, ""))
                lines.append(f"| `{key}` | {_cell(_fmt(value))} | {_cell(comment)} |")
            lines.append("")

    lines.extend(["### top-level keys", "", "| key | value | comment |", "|---|---|---|"])
    top_comments = _comments(CONF / "config.yaml")
    for group in ("objective", "sweep", "bias"):  # top-level keys that are their own config groups
        top_comments.update({f"{group}.{k}": c for k, c in _comments(CONF / group / "default.yaml").items()})
    for key, value in top.items():
        lines.append(f"| `{key}` | {_cell(_fmt(value))} | {_cell(top_comments.get(key, ''))} |")
    lines.append("")

    lines.extend(
        [
            "## Experiment presets",
            "",
            "`gpdlm train -m +experiment=<preset>` (or `gpdlm sweep beta +experiment=<preset>`); the studies they",
            "run are described in [sweeps.md](sweeps.md#experiment-presets-the-four-papers-studies). "
            "Files starting with `_` are shared parts, not presets. Your own presets and group options, in your",
            "own folder: [sweeps.md](sweeps.md#your-own-presets) (`-cd DIR`, `hydra.searchpath`, `GPDLM_CONFIG_PATH`).",
            "",
            "| preset | header of its file |",
            "|---|---|",
        ]
    )
    for path in sorted((CONF / "experiment").glob("*.yaml")):
        if not path.stem.startswith("_"):
            lines.append(f"| `{path.stem}` | {_cell(_header(path))} |")
    lines.append("")
    lines.extend(
        [
            "## Datasets",
            "",
            f"`dataset=<name>` (default `{choices['dataset']}`); `gpdlm datasets list` and `gpdlm datasets info NAME`",
            "describe them, [datasets/README.md](../datasets/README.md) gives the protocols. The default dataset's keys:",
            "",
            "| key | value | comment |",
            "|---|---|---|",
        ]
    )
    ds_comments = _comments(CONF / "dataset" / f"{choices['dataset']}.yaml")
    for key, value in dataset.items():
        rel = key.split(".", 1)[1]
        lines.append(f"| `{key}` | {_cell(_fmt(value))} | {_cell(ds_comments.get(rel, ''))} |")
    lines.extend(["", "| dataset | header of its file |", "|---|---|"])
    for path in sorted((CONF / "dataset").glob("*.yaml")):
        if not path.stem.startswith("_"):
            lines.append(f"| `{path.stem}` | {_cell(_header(path))} |")
    lines.append("")
    return "\n".join(lines)


def _schema_rows(schema, prefix: str) -> list[str]:
    import dataclasses

    from gpdlm_cli.schema.keys import rule_of

    out = []
    for f in dataclasses.fields(schema):
        sub = f.metadata.get("nested")
        if sub is not None:  # a sub-group (model.network): its keys, one row each
            out.extend(_schema_rows(sub, f"{prefix}{f.name}."))
            continue
        rule = rule_of(f)
        if rule is None:
            continue
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        allowed = rule.describe()
        if rule.when is not None:
            allowed += f" (checked when {rule.when[0]}={rule.when[1]})"
        row = [f"`{prefix}{f.name}`", rule.kind_text(), allowed, _fmt(default), rule.help]
        out.append("| " + " | ".join(_cell(c) for c in row) + " |")
    return out


def _schema_table(title: str, schema, prefix: str) -> list[str]:
    out = [f"### {title}", "", "| key | type | allowed | default | meaning |", "|---|---|---|---|---|"]
    return [*out, *_schema_rows(schema, prefix), ""]


def _estimator_option_tables() -> list[str]:
    """One table per estimator with options (``schema.options.ESTIMATOR_OPTIONS``)."""
    import dataclasses

    from gpdlm_cli.schema.options import ESTIMATOR_OPTIONS

    out = []
    for name, options in ESTIMATOR_OPTIONS.items():
        if dataclasses.fields(options):
            out.extend(_schema_table(f"estimator ({name})", options, "estimator."))
    return out


def _dataset_option_tables() -> list[str]:
    """One table per dataset loader with options (``schema.options.DATASET_OPTIONS``), naming its datasets."""
    import dataclasses

    from gpdlm_cli.data.registry import all_datasets
    from gpdlm_cli.schema.options import DATASET_OPTIONS

    users: dict[str, list[str]] = {}
    for name, info in all_datasets().items():
        users.setdefault(info.loader_key, []).append(name)
    out = []
    for key, options in sorted(DATASET_OPTIONS.items()):
        if dataclasses.fields(options) and users.get(key):
            names = ", ".join(f"`{n}`" for n in sorted(users[key]))
            out.extend(_schema_table(f"dataset options ({names})", options, "dataset."))
    return out


def schema_section() -> list[str]:
    """The key tables of the config schema (``gpdlm_cli.schema``): one per group, one per model family."""
    from gpdlm_cli import schema
    from gpdlm_cli.methods import FAMILIES

    lines = [
        "## Schema: types, ranges and choices",
        "",
        "What `gpdlm train` accepts for each key, from the config schema (`gpdlm_cli/schema/`, and each model",
        "family's `Spec`): the checks that answer a bad value with `gpdlm: error: the '<key>' parameter of <group>",
        "must be <allowed>; got <value> instead` use exactly these rules, before any data is read. Cross-key rules",
        "(L-BFGS needs the full batch, ...) are the schemas' `check()` methods and the families' `validate`.",
        "",
    ]
    lines.extend(_schema_table("top-level keys", schema.RunKeys, ""))
    for group, cls in schema.GROUPS.items():
        if group == "model":
            continue
        lines.extend(_schema_table(group, cls, f"{group}."))
        if group == "dataset":
            lines.extend(_schema_table("dataset.split", schema.SplitSpec, "dataset.split."))
            lines.extend(_dataset_option_tables())
        if group == "estimator":
            lines.extend(_estimator_option_tables())
    for family in FAMILIES:
        spec = getattr(family, "Spec", None)
        if spec is None:
            continue
        models = ", ".join(f"`{m}`" for m in family.MODELS)
        name = family.__name__.rsplit(".", 1)[1]
        lines.extend(_schema_table(f"model ({name}: {models})", spec, "model."))
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if docs/configuration.md is not up to date")
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        if not PAGE.exists() or PAGE.read_text() != text:
            print("docs/configuration.md is out of date: run `python tools/config_docs.py`", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text)
    print(f"wrote {PAGE.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
