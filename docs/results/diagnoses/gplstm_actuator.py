"""GP-LSTM (and GP-GRU, GP-RNN, GP-NARX) against their networks on the real Actuator data (issue 40): the
analyses of docs/results/diagnoses/gplstm.md, read from a Table 2 study's MLflow store (sqlite; read a *copy*
of a store that is being written) and from the runs' saved models (model.pt in each run's output folder).

    python gplstm_actuator.py curves DB [DATASET] [MODE]  # reported / at the val-best checkpoint / best / last
    python gplstm_actuator.py theta  DB                   # did the final theta steps raise the selected val RMSE?
    python gplstm_actuator.py dense  DB [DATASET] [MODE]  # gpdlm's GP head against a dense numpy exact GP
    python gplstm_actuator.py heads  DB [DATASET] [MODE]  # other heads on the trained features (sklearn)
    python gplstm_actuator.py near   DB [DATASET] [MODE]  # test RMSE by the test window's distance to training
    python gplstm_actuator.py spread DATASET...           # that distance against the training windows' spacing

Run from the repository root with PYTHONPATH=. (dense/heads/near/spread import gpdlm_cli). RMSEs are in
target units, as the study reports them.
"""

from __future__ import annotations

import collections
import json
import sqlite3
import statistics
import sys
import warnings

import numpy as np

GP = ("gp_lstm", "gp_gru", "gp_rnn", "gp_narx")
PAIRS = (("lstm", "gp_lstm"), ("gru", "gp_gru"), ("rnn", "gp_rnn"), ("narx", "gp_narx"))


def runs(db: str, dataset: str = "actuator", mode: str = "regression"):
    """(run id, model, seed, output folder) of the store's finished runs of one cell, by model and seed."""
    c = sqlite3.connect(db)
    p: dict = collections.defaultdict(dict)
    for rid, k, v in c.execute(
        "select run_uuid, key, value from params where key in ('dataset.name','dataset.mode','model.name','seed')"
    ):
        p[rid][k] = v
    for rid, v in c.execute("select run_uuid, value from tags where key = 'gpdlm.output_dir'"):
        p[rid]["dir"] = v
    finished = {r for (r,) in c.execute("select run_uuid from runs where status = 'FINISHED'")}
    out = [
        (rid, q["model.name"], int(q["seed"]), q.get("dir"))
        for rid, q in p.items()
        if rid in finished and q.get("dataset.name") == dataset and q.get("dataset.mode") == mode
    ]
    return c, sorted(out, key=lambda r: (r[1], r[2]))


def history(c, rid: str, key: str) -> dict[int, float]:
    return dict(c.execute("select step, value from metrics where run_uuid = ? and key = ?", (rid, key)).fetchall())


def latest(c, rid: str) -> dict[str, float]:
    return dict(c.execute("select key, value from latest_metrics where run_uuid = ?", (rid,)).fetchall())


def curves(db: str, dataset: str = "actuator", mode: str = "regression") -> None:
    """Per model (means over seeds): the reported test RMSE; the test RMSE at the logged checkpoint with the
    lowest val RMSE (GP models: before the final theta steps); the lowest test RMSE of any checkpoint (an
    oracle); at the last checkpoint; Spearman's rho of val against test RMSE over the checkpoints."""
    from scipy.stats import spearmanr

    c, rs = runs(db, dataset, mode)
    rows = collections.defaultdict(list)
    for rid, model, _seed, _ in rs:
        v, t = history(c, rid, "val_rmse"), history(c, rid, "test_rmse")
        steps = sorted(v)[:-1]  # the training checkpoints: the last point is the reported (final) evaluation
        best = min(steps, key=lambda s: v[s])
        rows[model].append(
            (
                latest(c, rid)["test_rmse"],
                t[best],
                min(t[s] for s in steps),
                t[steps[-1]],
                spearmanr([v[s] for s in steps], [t[s] for s in steps])[0],
            )
        )
    print("model     n  reported  at-val-best  oracle-best  last-ckpt  rho(val,test)")
    for pair in PAIRS:
        for m in pair:
            if rows[m]:
                cols = [statistics.fmean(r[i] for r in rows[m]) for i in range(5)]
                print(f"{m:8s} {len(rows[m]):2d}  " + "  ".join(f"{x:9.3f}" for x in cols))


def theta(db: str) -> None:
    """For each GP run whose selected checkpoint was logged: the val RMSE there against the reported one
    (after the final theta steps)."""
    for mode in ("regression", "autoregression"):
        c, rs = runs(db, "actuator", mode)
        worse = better = unmeasured = 0
        for rid, model, _seed, _ in rs:
            if model not in GP:
                continue
            lm = latest(c, rid)
            at = history(c, rid, "val_rmse").get(int(lm["best_iteration"]))
            if at is None:
                unmeasured += 1
            elif lm["val_rmse"] > at:
                worse += 1
            else:
                better += 1
        print(
            f"{mode}: the refit raised the selected val RMSE in {worse}, lowered it in {better}; {unmeasured} unmeasured"
        )


def _load(d: str):
    import torch

    from gpdlm_cli.run.saved_model import load_run

    torch.set_num_threads(1)
    r = load_run(d)
    m = r.method.model
    m.eval()
    m.condition(r.data.x_train, r.data.y_train)
    return r, m, float(np.atleast_1d(r.splits.y_std)[0])


def _rbf(a, b, ls, scale):
    from scipy.spatial.distance import cdist

    return scale * np.exp(-0.5 * cdist(a / ls, b / ls, "sqeuclidean"))


def dense(db: str, dataset: str = "actuator", mode: str = "regression") -> None:
    """gpdlm's predictive means and variances against mu = K_*n (K + s^2 I)^-1 y and k_** - K_*n (K + s^2 I)^-1
    K_n* computed with numpy on the same embeddings and hyperparameters (RBF ARD kernel)."""
    import torch

    c, rs = runs(db, dataset, mode)
    for _rid, model, seed, d in rs:
        if model not in GP:
            continue
        r, m, s = _load(d)
        gp = m.outputs[0]
        ls = gp.covar_module.base_kernel.lengthscale.detach().double().numpy().ravel()
        scale = float(gp.covar_module.outputscale.detach())
        s2 = float(m.output_likelihoods[0].noise.detach())
        with torch.no_grad():
            htr = m.embed(r.data.x_train).numpy()
            K = _rbf(htr, htr, ls, scale) + s2 * np.eye(len(htr))
            alpha = np.linalg.solve(K, r.data.y_train.double().numpy().reshape(-1))
            mu_g, var_g = (a[:, 0].numpy() for a in m.marginals_all(r.data.x_test))
            h = m.embed(r.data.x_test).numpy()
        Ks = _rbf(h, htr, ls, scale)
        mu_d = Ks @ alpha
        var_d = scale - np.einsum("ij,ji->i", Ks, np.linalg.solve(K, Ks.T))
        y = r.data.y_test.double().numpy().reshape(-1)
        print(
            f"{model} s{seed}: test RMSE gpdlm {np.sqrt(np.mean((mu_g - y) ** 2)) * s:.4f} dense "
            f"{np.sqrt(np.mean((mu_d - y) ** 2)) * s:.4f}; max |mean diff| {np.abs(mu_g - mu_d).max():.1e}, "
            f"max |var diff| {np.abs(var_g - var_d).max():.1e} (standardised); lengthscales {ls.round(3).tolist()}, "
            f"outputscale {scale:.3f}, noise {s2:.4f}"
        )


def heads(db: str, dataset: str = "actuator", mode: str = "regression") -> None:
    """Fixed trained features, other heads fitted on the training windows (sklearn, marginal likelihood):
    GP models -- a least-squares linear head on the embedding; networks -- an exact GP (RBF + noise) on the
    network's own 1-d output and on its last hidden layer (standardised; RBF, and linear + RBF)."""
    import torch
    from sklearn.gaussian_process import GaussianProcessRegressor
    from sklearn.gaussian_process.kernels import RBF, DotProduct, WhiteKernel
    from sklearn.gaussian_process.kernels import ConstantKernel as C

    warnings.filterwarnings("ignore")
    c, rs = runs(db, dataset, mode)
    for _rid, model, seed, d in rs:
        r, m, s = _load(d)
        X = {k: getattr(r.data, "x_" + k) for k in ("train", "val", "test")}
        Y = {k: getattr(r.data, "y_" + k).double().numpy().reshape(-1) for k in X}
        with torch.no_grad():
            own = {k: m.marginals_all(X[k])[0][:, 0].double().numpy() for k in X}
            F = {k: (m.embed(X[k]) if model in GP else m.network.hidden(X[k])).double().numpy() for k in X}

        def rmse(pred, k, Y=Y, s=s):
            return float(np.sqrt(np.mean((pred - Y[k]) ** 2)) * s)

        def fit(kernel, feats, X=X, Y=Y, rmse=rmse):
            g = GaussianProcessRegressor(kernel, random_state=0).fit(feats["train"], Y["train"])
            return {k: rmse(g.predict(feats[k]), k) for k in X}

        out = {"model": model, "seed": seed, "own": {k: rmse(own[k], k) for k in X}}
        if model in GP:
            A = np.c_[F["train"], np.ones(len(F["train"]))]
            w = np.linalg.lstsq(A, Y["train"], rcond=None)[0]
            out["linear_head"] = {k: rmse(np.c_[F[k], np.ones(len(F[k]))] @ w, k) for k in X}
        else:
            out["gp_on_output"] = fit(C(1.0) * RBF(1.0) + WhiteKernel(0.1), {k: own[k][:, None] for k in X})
            mu, sd = F["train"].mean(0), F["train"].std(0) + 1e-6
            Z = {k: (F[k] - mu) / sd for k in X}
            width = np.sqrt(Z["train"].shape[1])
            out["gp_rbf_hidden"] = fit(C(1.0) * RBF(width) + WhiteKernel(0.1), Z)
            out["gp_linear_rbf_hidden"] = fit(C(0.01) * DotProduct(1.0) + C(1.0) * RBF(width) + WhiteKernel(0.1), Z)
        print(json.dumps(out), flush=True)


def near(db: str, dataset: str = "actuator", mode: str = "regression") -> None:
    """Test RMSE (pooled over seeds) on the thirds of the test windows nearest to / farthest from the training
    windows (Euclidean distance of the standardised input window to its nearest training window)."""
    import torch
    from scipy.spatial.distance import cdist

    c, rs = runs(db, dataset, mode)
    err, third = collections.defaultdict(list), None
    for _rid, model, _seed, d in rs:
        r, m, s = _load(d)
        with torch.no_grad():
            mu = m.marginals_all(r.data.x_test)[0][:, 0].double().numpy()
        err[model].append((mu - r.data.y_test.double().numpy().reshape(-1)) * s)
        if third is None:
            xtr = r.data.x_train.double().numpy().reshape(len(r.data.x_train), -1)
            nn = cdist(r.data.x_test.double().numpy().reshape(len(r.data.x_test), -1), xtr).min(1)
            q = np.quantile(nn, [1 / 3, 2 / 3])
            third = np.digitize(nn, q)
            print(f"distance terciles {q.round(2).tolist()}")
    print("model     all    near   middle  far")
    for pair in PAIRS:
        for model in pair:
            if err[model]:
                E = np.array(err[model])
                cols = [np.sqrt((E**2).mean())] + [np.sqrt((E[:, third == b] ** 2).mean()) for b in range(3)]
                print(f"{model:8s} " + "  ".join(f"{x:.3f}" for x in cols))


def spread(*datasets: str) -> None:
    """How far validation and test windows lie from the training windows, against the training windows' own
    spacing (leave-one-out nearest-neighbour distance), in the Table 2 preset's regression windows."""
    from scipy.spatial.distance import cdist

    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.sweep.compose import compose_jobs

    for ds in datasets:
        (cfg,) = compose_jobs(
            [
                ["+experiment=gplstm_sysid", f"dataset={ds}", "dataset.mode=regression", "model=lstm"]
                + ["progress=false", "tracking.enabled=false", "threads=1"]
            ]
        )
        D = prepare(cfg).data
        flat = {
            k: getattr(D, "x_" + k).double().numpy().reshape(len(getattr(D, "x_" + k)), -1)
            for k in ("train", "val", "test")
        }
        own = np.sort(cdist(flat["train"], flat["train"]), 1)[:, 1]
        te, va = cdist(flat["test"], flat["train"]).min(1), cdist(flat["val"], flat["train"]).min(1)
        print(
            f"{ds}: training spacing median {np.median(own):.2f}; test distance quantiles 1/3, 1/2, 2/3, 0.9: "
            f"{np.quantile(te, [1 / 3, 0.5, 2 / 3, 0.9]).round(2).tolist()}; validation median {np.median(va):.2f}"
        )


if __name__ == "__main__":
    cmd, args = sys.argv[1], sys.argv[2:]
    {"curves": curves, "theta": theta, "dense": dense, "heads": heads, "near": near, "spread": spread}[cmd](*args)
