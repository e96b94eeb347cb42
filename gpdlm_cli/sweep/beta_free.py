"""Models whose training ignores ``objective.beta`` (the collapsed and exact GPs, PIC, the recurrent
GPs, the RKHS methods, SSGP): a sweep over beta would train each of them once per beta value to the
same result. ``collapse_beta_free`` keeps one job of each -- what gpdlm's sweeper launches and the
sweep plan counts. Pure strings, no torch: the launching process of a multirun imports this.
Which models: those whose family declares ``USES_BETA`` false (``methods.base.DECLARATIONS``), read
from the family modules' source."""

from __future__ import annotations

import ast
import functools
from pathlib import Path


def _declared_beta_free() -> set[str]:
    """The ``model.name`` values whose family declares ``USES_BETA`` false, read from the family
    modules' source (``MODELS`` and ``USES_BETA`` are literals there; importing them would import torch)."""
    free = set()
    for path in sorted((Path(__file__).resolve().parents[1] / "methods").glob("*.py")):
        found = {}
        for node in ast.parse(path.read_text()).body:
            if (
                isinstance(node, ast.Assign)
                and len(node.targets) == 1
                and isinstance(node.targets[0], ast.Name)
                and node.targets[0].id in ("MODELS", "USES_BETA")
            ):
                found[node.targets[0].id] = ast.literal_eval(node.value)
        uses = found.get("USES_BETA", True)
        for model in found.get("MODELS", ()):
            if not (uses.get(model, True) if isinstance(uses, dict) else uses):
                free.add(model)
    return free


def _config_model_name(option: str, conf: Path) -> str | None:
    """``model.name`` of the config option ``conf/model/<option>.yaml`` (following its defaults)."""
    import yaml

    path = conf / f"{option}.yaml"
    if not path.is_file():
        return None
    d = yaml.safe_load(path.read_text()) or {}
    if "name" in d:
        return str(d["name"])
    parents = [p for p in d.get("defaults", []) if isinstance(p, str) and p != "_self_"]
    return _config_model_name(parents[0], conf) if parents else None


@functools.lru_cache(maxsize=1)
def beta_free_options() -> frozenset[str]:
    """The ``model=`` options (config files of conf/model) whose model ignores objective.beta."""
    conf = Path(__file__).resolve().parents[1] / "conf" / "model"
    free = _declared_beta_free()
    return frozenset(p.stem for p in conf.glob("*.yaml") if _config_model_name(p.stem, conf) in free)


BETA_KEY = "objective.beta"


def _key(line: str) -> str:
    return line.split("=", 1)[0].lstrip("+~")


def collapse_beta_free(jobs: list[list[str]]) -> tuple[list[list[str]], dict[str, int]]:
    """(the jobs without the repeats of a beta-free model at another beta, {model: jobs dropped}).
    A job is a list of ``key=value`` overrides; a job whose ``model=`` names a beta-free model is a
    repeat of an earlier job when the two differ only in ``objective.beta``. Order is kept."""
    seen, kept, dropped = set(), [], {}
    for job in jobs:
        model = next((ln.split("=", 1)[1] for ln in job if _key(ln) == "model"), None)
        if model not in beta_free_options() or not any(_key(ln) == BETA_KEY for ln in job):
            kept.append(job)
            continue
        rest = tuple(ln for ln in job if _key(ln) != BETA_KEY)
        if rest in seen:
            dropped[model] = dropped.get(model, 0) + 1
            continue
        seen.add(rest)
        kept.append(job)
    return kept, dropped


def collapse_note(dropped: dict[str, int]) -> str:
    """'model=fitc ignores objective.beta: 2 repeated jobs not launched (one run per beta-free configuration)'."""
    models = ", ".join(f"model={m}" for m in dropped)
    n = sum(dropped.values())
    verb = "ignores" if len(dropped) == 1 else "ignore"
    return (
        f"{models} {verb} objective.beta: {n} job(s) that would repeat a run at another beta not launched "
        f"(one run per configuration; its objective.beta param is the first swept value)"
    )


__all__ = ["beta_free_options", "collapse_beta_free", "collapse_note"]
