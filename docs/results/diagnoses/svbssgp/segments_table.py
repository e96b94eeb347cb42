"""Section 1 of docs/results/diagnoses/svbssgp.md, held-out segments: test RMSE (km/h) per seed of sVBSSGP
(gamma = 0 and 1, 30 epochs), PIC++ (10 epochs; "PIC++ 30": the preset's 30) and DTC++ (10 epochs) on the AIMPEAK-like generator with dataset.holdout=segments, their means, and
the one-sided paired t-test of sVBSSGP (gamma = 0) against PIC++ (and DTC++) over the seeds. Reads the committed
records (segments_runs.jsonl.gz, written by segments.sh); ``--anchors`` also computes the constant and 2-NN
anchors of each seed's split (the generator, a few seconds a seed):
    python docs/results/diagnoses/svbssgp/segments_table.py [--anchors]      # from the repository root
"""

import statistics
import sys

import pandas as pd
from scipy import stats

RECORDS = "docs/results/diagnoses/svbssgp/segments_runs.jsonl.gz"
# (arm, model.name, trainer.max_epochs or None for any, metric)
ARMS = [("sVBSSGP g0", "svbssgp", None, "test_rmse_g0"), ("sVBSSGP g1", "svbssgp", None, "test_rmse_g1"),
        ("PIC++", "pic", 10, "test_rmse"), ("PIC++ 30", "pic", 30, "test_rmse"),
        ("DTC++", "svgp", 10, "test_rmse")]  # fmt: skip


def load() -> dict:
    """{arm: {seed: test RMSE}} of the FINISHED held-out-segments runs whose holdout_seed is the run's seed."""
    d = pd.read_json(RECORDS, lines=True)
    d = d[d.params.notna()]
    out: dict = {}
    for p, m, status in zip(d.params, d.metrics, d.status):
        if status != "FINISHED" or p.get("dataset.holdout") != "segments":
            continue
        if p.get("dataset.holdout_seed") != p.get("seed"):
            continue
        for arm, model, epochs, metric in ARMS:
            if p.get("model.name") != model or metric not in m:
                continue
            if epochs is None or int(p["trainer.max_epochs"]) == epochs:
                out.setdefault(arm, {})[int(p["seed"])] = float(m[metric])
    return out


def anchors(seed: int) -> dict:
    """The anchors of ``python -m gpdlm_cli.commands.anchors`` on that seed's held-out-segments split."""
    from gpdlm_cli.build import load_data
    from gpdlm_cli.metrics.anchors import anchor_rmse
    from gpdlm_cli.sweep.compose import compose_jobs

    over = ["dataset=aimpeak", "dataset.holdout=segments", f"dataset.holdout_seed={seed}", f"seed={seed}"]
    (cfg,) = compose_jobs([over + ["tracking.enabled=false"]])
    table, splits, _ = load_data(cfg)
    tr, te = splits.indices["train"], splits.indices["test"]
    return anchor_rmse(table.X[tr], table.y[tr], table.X[te], table.y[te], group_cols=(0, 1, 2, 3), time_col=4)


res = load()
seeds = sorted(set().union(*(r.keys() for r in res.values())))
if "--anchors" in sys.argv:
    anc = {s: anchors(s) for s in seeds}
    res["constant"] = {s: a["constant"] for s, a in anc.items()}
    res["2-NN"] = {s: a["knn2"] for s, a in anc.items()}
cols = [a for a, _, _, _ in ARMS if a in res] + [a for a in ("constant", "2-NN") if a in res]
print("seed | " + " | ".join(cols))
for s in seeds:
    print(f"{s} | " + " | ".join(f"{res[c][s]:.2f}" if s in res[c] else "-" for c in cols))
print("mean | " + " | ".join(f"{statistics.fmean(res[c].values()):.2f} ({len(res[c])})" for c in cols))
for other in ("PIC++", "PIC++ 30", "DTC++", "sVBSSGP g1", "2-NN"):
    common = sorted(set(res.get("sVBSSGP g0", {})) & set(res.get(other, {})))
    if len(common) < 2:
        continue
    a, b = [res["sVBSSGP g0"][s] for s in common], [res[other][s] for s in common]
    t = stats.ttest_rel(a, b, alternative="less")
    lower = sum(x < y for x, y in zip(a, b))
    print(f"sVBSSGP g0 < {other}: {lower}/{len(common)} seeds, mean difference {statistics.fmean(b) - statistics.fmean(a):.2f}"
          f" km/h, t = {t.statistic:.2f}, one-sided p = {t.pvalue:.2g}")  # fmt: skip
