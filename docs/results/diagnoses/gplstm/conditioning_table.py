"""Section 7a of docs/results/diagnoses/gplstm.md: mean test_sim_rmse on Actuator (free simulation) per GP model,
teacher-forced (the fixed study) / own rollouts (the own-rollouts study) / own rollouts with the GP conditioned on
the true-target windows (model.training.feedback_conditioning=true_targets, conditioning_runs.jsonl.gz), and
one-sided paired t-tests over seeds (the approach of the own-rollouts study's table). Reads the committed records:
    python docs/results/diagnoses/gplstm/conditioning_table.py      # from the repository root
"""

import os
import statistics

import pandas as pd
from scipy import stats

RESULTS = "docs/results"
FILES = {
    "tf": f"{RESULTS}/gplstm_real_fixed_2026-11-29/runs.jsonl.gz",
    "own": f"{RESULTS}/gplstm_own_rollouts_2026-11-29/runs.jsonl.gz",
    "cond": f"{RESULTS}/diagnoses/gplstm/conditioning_runs.jsonl.gz",
}
PAIRS = [("gp_narx", "narx"), ("gp_rnn", "rnn"), ("gp_gru", "gru"), ("gp_lstm", "lstm")]


def load(path: str, feedback: str, conditioning: str, metric: str = "test_sim_rmse") -> dict:
    """{model: {seed: metric}} of the FINISHED Actuator free-simulation runs with that protocol."""
    d = pd.read_json(path, lines=True)
    d = d[d.params.notna()]
    out: dict = {}
    for p, m, status in zip(d.params, d.metrics, d.status):
        if status != "FINISHED" or p.get("dataset.name") != "actuator" or p.get("dataset.mode") != "free_simulation":
            continue
        if p.get("model.training.feedback", "true_targets") != feedback:
            continue
        if p.get("model.training.feedback_conditioning", "rollouts") != conditioning:
            continue
        if metric in m:
            out.setdefault(p["model.name"], {})[int(p["seed"])] = float(m[metric])
    return out


def paired(a: dict, b: dict) -> str:
    """a against b over their common seeds: means, how often a is lower, p of a < b (one-sided paired t)."""
    seeds = sorted(set(a) & set(b))
    if len(seeds) < 2:
        return "-"
    d = [b[s] - a[s] for s in seeds]
    p = stats.ttest_1samp(d, 0.0, alternative="greater").pvalue
    ma, mb = statistics.fmean(a[s] for s in seeds), statistics.fmean(b[s] for s in seeds)
    return f"{ma:.3f} vs {mb:.3f}, lower in {sum(x > 0 for x in d)}/{len(seeds)}, p = {p:.2g}"


tf = load(FILES["tf"], "true_targets", "rollouts")
own = load(FILES["own"], "own_predictions", "rollouts")
cond = load(FILES["cond"], "own_predictions", "true_targets") if os.path.exists(FILES["cond"]) else {}


def mean(r: dict) -> str:
    return f"{statistics.fmean(r.values()):.3f} ({len(r)})" if r else "-"


print("model | teacher-forced | own rollouts | own rollouts, true-target conditioning (n)")
for gp, net in PAIRS:
    print(f"{gp} | {mean(tf.get(gp, {}))} | {mean(own.get(gp, {}))} | {mean(cond.get(gp, {}))}")
    print(f"{net} | {mean(tf.get(net, {}))} | {mean(own.get(net, {}))} | -")
print("\npaired: GP (true-target conditioning) vs its network (own rollouts)")
for gp, net in PAIRS:
    print(f"  {gp} vs {net}: {paired(cond.get(gp, {}), own.get(net, {}))}")
print("paired: GP (true-target conditioning) vs the same GP (own rollouts, conditioned on them)")
for gp, _ in PAIRS:
    print(f"  {gp}: {paired(cond.get(gp, {}), own.get(gp, {}))}")
print("paired: GP (true-target conditioning) vs the same GP teacher-forced")
for gp, _ in PAIRS:
    print(f"  {gp}: {paired(cond.get(gp, {}), tf.get(gp, {}))}")
print("\none-step test_rmse: teacher-forced | own rollouts | true-target conditioning")
one = [
    load(FILES[k], f, c, "test_rmse") if os.path.exists(FILES[k]) else {}
    for k, f, c in [
        ("tf", "true_targets", "rollouts"),
        ("own", "own_predictions", "rollouts"),
        ("cond", "own_predictions", "true_targets"),
    ]
]
for gp, net in PAIRS:
    for name in (gp, net):
        print(f"{name} | " + " | ".join(mean(o.get(name, {})) for o in one))
