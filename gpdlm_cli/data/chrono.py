"""Chronological splits of sequence tables, standardised per channel (GP-LSTM paper, Sec. 5.2.3).

Windows of one series overlap: two neighbouring windows share all but one step. Random validation
rows would therefore have near-copies in the training rows (they leak), and the test rows must stay
in time order for free simulation and per-horizon errors. So, for a table of task ``sequence``:

* **test**: the table's fixed test part (``test_mask``: the test trip, or the later part of a
  series), in time order (``test_size`` keeps its first rows);
* **validation**: the last ``val_fraction`` of the training span ("25% of the training data used
  for validation", Sec. 5.2.3), in time order;
* **training**: the windows before it, in time order (``train_size`` keeps the first rows: a
  fraction of the trip).

**Per-channel standardisation** (as the authors' ``standardize_data``): every tap ``col[t-k]`` of a
channel is scaled with the *same* mean and standard deviation -- those of all its entries in the
training windows -- so a recurrent network sees one scale per channel at every time step (per
column, the same channel would get different scales at different lags). The past values of a
target (autoregressive windows, ``y[t-k]``) are scaled exactly like the target itself, so a
standardised prediction can be fed back as a past value unchanged (free simulation). Multi-output
targets (y of shape (n, d)) are standardised per output.
"""

from __future__ import annotations

import re

import numpy as np

from ..exceptions import DataError
from .splits import DataSplits, first_train_rows
from .table import Table

_TAP = re.compile(r"^(?P<channel>.+)\[t-\d+\]$")


def channel_of(name: str) -> str | None:
    """``'speed[t-3]'`` -> ``'speed'``; None for a column that is not a window tap."""
    m = _TAP.match(str(name))
    return m["channel"] if m else None


def target_names(table: Table) -> list[str]:
    """The target's name(s): multi-output tables join them with commas."""
    return str(table.target_name).split(",")


def chronological_splits(table: Table, *, val_fraction: float, train_size=None, test_size=None,
                         standardize_x: bool = True, standardize_y: bool | None = None) -> DataSplits:
    """Split a sequence table in time order and standardise it per channel (module docstring)."""
    mask = np.asarray(table.test_mask, dtype=bool)
    test_idx = np.flatnonzero(mask)
    pool = np.flatnonzero(~mask)
    if test_idx.size == 0:
        raise DataError(f"dataset '{table.name}' has no test rows in its fixed (sequence) test part")
    if test_size:
        test_idx = test_idx[: int(test_size)]
    n_val = int(round(val_fraction * pool.size))
    train_idx, val_idx = pool[: pool.size - n_val], pool[pool.size - n_val:]
    if train_idx.size < 2:
        raise DataError(f"dataset '{table.name}' ({table.n} rows) leaves {train_idx.size} training rows after "
                        f"the chronological validation block ({n_val} rows)")
    train_idx = first_train_rows(train_idx, train_size, table.name,
                                 f"training windows before its validation block ({n_val})")

    X, y = table.X, table.y
    names = target_names(table)
    multi = y.ndim == 2
    Y = y if multi else y[:, None]
    if standardize_y is None or standardize_y:
        y_mean, y_std = Y[train_idx].mean(0), Y[train_idx].std(0)
        if np.any(y_std == 0):
            raise DataError(f"dataset '{table.name}': a training target is constant")
    else:
        y_mean, y_std = np.zeros(Y.shape[1]), np.ones(Y.shape[1])
    x_mean, x_std = np.zeros(X.shape[1]), np.ones(X.shape[1])
    if standardize_x:
        channels: dict[str, list[int]] = {}
        for j, name in enumerate(table.feature_names):
            channels.setdefault(channel_of(name) or f"#{j}", []).append(j)
        for ch, cols in channels.items():
            if ch in names:  # past values of an output: the output's own scale
                o = names.index(ch)
                m, s = y_mean[o], y_std[o]
            else:
                vals = X[np.ix_(train_idx, cols)]
                m, s = vals.mean(), vals.std()
                s = s if s > 0 else 1.0
            x_mean[cols], x_std[cols] = m, s

    def sx(idx):
        return (X[idx] - x_mean) / x_std

    def sy(idx):
        out = (Y[idx] - y_mean) / y_std
        return out if multi else out[:, 0]

    notes = [f"chronological split: {train_idx.size} training, {val_idx.size} validation (the last "
             f"{val_fraction:g} of the training span), {test_idx.size} test windows, all in time order; "
             f"features standardised per channel"]
    ym, ys = (y_mean, y_std) if multi else (float(y_mean[0]), float(y_std[0]))
    return DataSplits(table.name, table.task, sx(train_idx), sy(train_idx), sx(val_idx), sy(val_idx),
                      sx(test_idx), sy(test_idx), x_mean, x_std, ym, ys, table.fingerprint(),
                      table.feature_names, notes=notes, indices={"train": train_idx, "val": val_idx, "test": test_idx})


__all__ = ["channel_of", "chronological_splits", "target_names"]
