"""Anchors: what trivial local predictors score on a split, for reading a model's RMSE against them.

Issue 40: on the AIMPEAK-like generator with the paper's random 95/5 split, the same-segment average
of slots t-1 and t+1 scores 3.03 km/h and plain 2-nearest-neighbour 3.65 -- PIC++ scores 3.07, sVBSSGP
5.26 -- so that split measures interpolation. :func:`anchor_rmse` computes, in target units:

* ``constant``: the training mean;
* ``knn<k>``: the mean target of the k nearest training rows, on inputs standardised by the training
  rows' mean and sd (Euclidean; ties broken by training-row order);
* ``neighbours``: within the test row's *group* (rows with equal ``group_cols``: an AIMPEAK segment),
  the mean of the training rows at the nearest earlier and the nearest later ``time_col`` value (one
  side if only one exists); a group without training rows falls back to ``knn<k>``. ``adjacent_share``
  is the share of test rows whose group has training rows at exactly t-1 and t+1 (time in steps of 1).

Run on a configured split: ``python -m gpdlm_cli.commands.anchors dataset=aimpeak seed=0 [overrides]``.
"""

from __future__ import annotations

import math

import numpy as np


def anchor_rmse(x_train, y_train, x_test, y_test, *, group_cols=(), time_col=None, k: int = 2) -> dict[str, float]:
    """The anchors' test RMSEs (module docstring) for (n, d) inputs and (n,) targets in their own units."""
    x_train, x_test = np.asarray(x_train, float), np.asarray(x_test, float)
    y_train, y_test = np.asarray(y_train, float).ravel(), np.asarray(y_test, float).ravel()
    mu, sd = x_train.mean(0), x_train.std(0)
    sd = np.where(sd > 0, sd, 1.0)
    a, b = (x_train - mu) / sd, (x_test - mu) / sd
    knn = np.empty(y_test.size)
    for i in range(0, b.shape[0], 128):  # exact distances, ties broken by training-row order
        d = ((b[i : i + 128, None, :] - a[None]) ** 2).sum(-1)
        knn[i : i + 128] = y_train[np.argsort(d, axis=1, kind="stable")[:, :k]].mean(1)

    def rmse(pred):
        return float(math.sqrt(np.mean((pred - y_test) ** 2)))

    out = {"constant": rmse(np.full_like(y_test, y_train.mean())), f"knn{k}": rmse(knn)}
    if time_col is None or not group_cols:
        return out
    cols = list(group_cols)
    by_group: dict[tuple, tuple[np.ndarray, np.ndarray]] = {}
    keys_train = [tuple(r) for r in x_train[:, cols]]
    order = np.argsort(x_train[:, time_col], kind="stable")
    groups: dict[tuple, list[int]] = {}
    for i in order:
        groups.setdefault(keys_train[i], []).append(i)
    for g, rows in groups.items():
        by_group[g] = (x_train[rows, time_col], y_train[rows])
    pred = knn.copy()
    adjacent = 0
    for j, row in enumerate(x_test):
        g = tuple(row[cols])
        if g not in by_group:
            continue
        t, ys = by_group[g]
        tj = row[time_col]
        pos = np.searchsorted(t, tj)
        before = pos - 1 if pos > 0 and t[pos - 1] < tj else None
        after_pos = np.searchsorted(t, tj, side="right")
        after = after_pos if after_pos < t.size else None
        sides = [ys[i] for i in (before, after) if i is not None]
        if sides:
            pred[j] = float(np.mean(sides))
        if before is not None and after is not None and t[before] == tj - 1 and t[after] == tj + 1:
            adjacent += 1
    out["neighbours"] = rmse(pred)
    out["adjacent_share"] = adjacent / max(1, y_test.size)
    return out
