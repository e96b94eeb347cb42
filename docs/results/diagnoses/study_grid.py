"""Shared by the diagnosis scripts of this folder: a study's beta grids from its committed run records
(docs/results/<study>/runs*.jsonl.gz) and the per-seed selection its report makes (the lowest validation NLL)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path


def study_runs(files: list[Path]) -> list[dict]:
    """The FINISHED runs of run-records files (``gpdlm export``: a header line, the runs, a trailer line)."""
    out = []
    for f in files:
        lines = gzip.decompress(Path(f).read_bytes()).splitlines()
        out += [e for e in map(json.loads, lines[1:-1]) if e.get("status") == "FINISHED"]
    return out


def grid(runs: list[dict], model: str, variant: str, n: int) -> dict:
    """seed -> {beta: (val_nll, test_nll, iterations)} of the runs of a method at training size n."""
    out: dict = {}
    for e in runs:
        p, m = e["params"], e["metrics"]
        if (p.get("model.name"), p.get("model.variant"), p.get("dataset.split.train_size")) == (model, variant, str(n)):
            if "objective.beta" in p and "val_nll" in m:
                out.setdefault(int(p["seed"]), {})[float(p["objective.beta"])] = (
                    m["val_nll"],
                    m["test_nll"],
                    m.get("iterations"),
                )
    return out


def selected(per_seed: dict) -> dict:
    """seed -> (beta, val_nll, test_nll, iterations) of the lowest validation NLL."""
    return {s: min(((b, *v) for b, v in bs.items()), key=lambda t: t[1]) for s, bs in per_seed.items()}


def to_rerun(runs: list[dict], n: int, neighbours: bool = True) -> list[tuple[int, float]]:
    """(seed, beta) of joint DLM's selected run per seed at size n, with the grid's betas either side of it
    (``neighbours``: so that a selection made again can move)."""
    joint = grid(runs, "dlm", "joint", n)
    out = []
    for s, (beta, *_rest) in sorted(selected(joint).items()):
        betas = sorted(joint[s])
        i = betas.index(beta)
        out += [(s, b) for b in betas[max(0, i - 1) : i + 2]] if neighbours else [(s, beta)]
    return out
