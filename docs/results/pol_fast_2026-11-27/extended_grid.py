"""beta-ELBO selected (validation NLL) over the paper's grid vs the grid extended below 0.01 (experiment
regression_logloss_pol_lowbeta), and joint DLM minus each, paired over seeds (README.md here).

    python docs/results/pol_fast_2026-11-27/extended_grid.py /path/to/mlflow.db
"""
import math
import sqlite3
import statistics as st
import sys

from scipy import stats
db = sqlite3.connect(sys.argv[1] if len(sys.argv) > 1 else "mlflow.db")
q = """select r.run_uuid, e.name,
 (select value from params p where p.run_uuid=r.run_uuid and key='model.name'),
 (select value from params p where p.run_uuid=r.run_uuid and key='model.variant'),
 cast((select value from params p where p.run_uuid=r.run_uuid and key='objective.beta') as real),
 cast((select value from params p where p.run_uuid=r.run_uuid and key='dataset.split.train_size') as int),
 cast((select value from params p where p.run_uuid=r.run_uuid and key='seed') as int),
 (select value from latest_metrics m where m.run_uuid=r.run_uuid and key='val_nll'),
 (select value from latest_metrics m where m.run_uuid=r.run_uuid and key='test_nll')
 from runs r join experiments e on e.experiment_id=r.experiment_id where r.status='FINISHED'"""
rows = [r for r in db.execute(q) if r[7] is not None]
def select(model, variant, n, seed, exps):
    c = [r for r in rows if r[2] == model and r[3] == variant and r[5] == n and r[6] == seed and r[1] in exps]
    best = min(c, key=lambda r: r[7])
    return best[8], best[4]
for n in (2000, 4000):
    paper = [select("svgp", "joint", n, s, {"regression_logloss_pol"}) for s in range(5)]
    wide = [select("svgp", "joint", n, s, {"regression_logloss_pol", "regression_logloss_pol_lowbeta"}) for s in range(5)]
    dlm = [select("dlm", "joint", n, s, {"regression_logloss_pol"}) for s in range(5)]
    for name, v in (("paper grid", paper), ("extended", wide)):
        t = [x[0] for x in v]
        d = [a[0] - b for a, b in zip(dlm, t)]
        p = stats.ttest_1samp(d, 0, alternative="less").pvalue
        print(f"n={n} beta-ELBO {name}: betas {[round(x[1], 5) for x in v]} test NLL {st.mean(t):.4f} +- {st.stdev(t)/math.sqrt(5):.4f};"
              f" joint DLM minus it {st.mean(d):+.4f} p={p:.2g}")
