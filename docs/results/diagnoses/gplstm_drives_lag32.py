"""Drives regression at the paper's text's lag 32 against Table 4's lag 16 (docs/results/diagnoses/gplstm.md,
section 9): mean test RMSE per model in target units (``test_rmse``) and standardised (``test_rmse_norm``, the
paper's unit), the paper's figure, and the paired one-sided tests of each GP model against its network.

    PYTHONPATH=. python docs/results/diagnoses/gplstm_drives_lag32.py    # from the repository root

Lag 16: the fixed study's committed records (docs/results/gplstm_real_fixed_2026-11-29/runs.jsonl.gz), lag 32:
this section's runs (docs/results/diagnoses/gplstm/drives_lag32_runs.jsonl.gz), the same protocol with
``table4.lag.drives.regression=32``. Also the input-window floor of ``gplstm_units.py`` at both lags.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from scipy import stats

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gplstm_units import MODELS, ROOT, input_window_bound, paper_table2, target_sds  # noqa: E402

RECORDS = {
    16: ROOT / "docs/results/gplstm_real_fixed_2026-11-29/runs.jsonl.gz",
    32: ROOT / "docs/results/diagnoses/gplstm/drives_lag32_runs.jsonl.gz",
}
PAIRS = [("gp_narx", "narx"), ("gp_rnn", "rnn"), ("gp_lstm", "lstm"), ("gp_gru", "gru")]


def drives_regression(path: Path) -> dict[tuple[int, str], dict[int, tuple[float, float]]]:
    """(lag, model) -> seed -> (test_rmse, test_rmse_norm) of the FINISHED Drives regression runs of ``path``."""
    import pandas as pd

    d = pd.read_json(path, lines=True)
    d = d[d["run_id"].notna() & (d["status"] == "FINISHED")]
    out: dict[tuple[int, str], dict[int, tuple[float, float]]] = {}
    for params, metrics in zip(d["params"], d["metrics"], strict=True):
        if params["dataset.name"] != "drives" or params["dataset.mode"] != "regression":
            continue
        key = (int(params["dataset.lag"]), params["model.name"])
        seed = int(params["seed"])
        if seed in out.setdefault(key, {}):
            raise AssertionError(f"{path}: two runs of {key} seed {seed}")
        out[key][seed] = (float(metrics["test_rmse"]), float(metrics["test_rmse_norm"]))
    return out


def main() -> int:
    runs: dict[tuple[int, str], dict[int, tuple[float, float]]] = {}
    for lag, path in RECORDS.items():
        got = drives_regression(path)
        if {k[0] for k in got} != {lag}:
            raise AssertionError(f"{path}: lags {sorted({k[0] for k in got})}, expected {lag}")
        runs.update(got)
    paper = paper_table2()
    print("Drives regression, mean over seeds: test_rmse (target units) / test_rmse_norm (standardised), paper")
    print("(± the standardised RMSE's sd over seeds)")
    print(f"{'model':8} {'lag 16':>25} {'lag 32':>25} {'seeds 32':>9} {'paper':>6}")
    for model, name in MODELS.items():
        cells = []
        for lag in (16, 32):
            r = runs.get((lag, model), {})
            if r:
                raw, std = np.mean([v[0] for v in r.values()]), np.mean([v[1] for v in r.values()])
                sd = np.std([v[1] for v in r.values()], ddof=1)
                cells.append(f"{raw:.3f} / {std:.3f} ± {sd:.3f}")
            else:
                cells.append("-")
        p = paper.get(("drives", "regression", model))
        seeds = ",".join(str(s) for s in sorted(runs.get((32, model), {})))
        print(f"{name:8} {cells[0]:>25} {cells[1]:>25} {seeds:>9} {p if p else '-':>6}")
    print()
    print("GP model vs its network (paired over seeds, one-sided: GP lower; test_rmse; seeds where both ran):")
    for lag in (16, 32):
        for gp, net in PAIRS:
            g, n = runs.get((lag, gp), {}), runs.get((lag, net), {})
            seeds = sorted(set(g) & set(n))
            if len(seeds) < 2:
                continue
            a, b = np.array([g[s][0] for s in seeds]), np.array([n[s][0] for s in seeds])
            t = stats.ttest_rel(a, b, alternative="less")
            print(
                f"  lag {lag}: {MODELS[gp]:8} {a.mean():.3f} vs {MODELS[net]:5} {b.mean():.3f}: GP ahead on "
                f"{int(np.sum(a < b))}/{len(seeds)} seeds, p = {t.pvalue:.3g}"
            )
    print()
    print("Input-window floor (gplstm_units.py): each distinct test input window predicted by its own test mean")
    for lag in (16, 32):
        f, sds = input_window_bound("drives", lag), target_sds("drives", "regression", lag)
        print(
            f"  lag {lag}: {f['target']:.3f} target units / {f['std']:.3f} standardised, "
            f"{int(f['distinct'])} distinct of {int(f['n'])} test windows; {int(sds['n_train'])} training windows, "
            f"train sd {sds['train']:.4f}; the training mean scores {sds['mean_predictor']:.3f} standardised"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
