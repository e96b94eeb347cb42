"""How a split is scaled: standardisation with training statistics only (``splits.py`` picks the
rows; this module scales them), one scaler for random, published-mask and chronological splits.

* **Targets**, per output: y' = (y - mean_o) / std_o with the mean and standard deviation of output
  o over the training rows (a single-output table has one output; regression and sequence tables
  are scaled by default, classification and count targets are left as they are).
* **Features, per column** (random and published-mask splits): x'_j = (x_j - mean_j) / std_j over
  the training rows (a constant column keeps std 1).
* **Features, per channel** (chronological splits of sequence tables; GP-LSTM paper, Sec. 5.2.3,
  as the authors' ``standardize_data``): every tap ``col[t-k]`` of a channel is scaled with the
  *same* mean and standard deviation -- those of all its entries in the training windows -- so a
  recurrent network sees one scale per channel at every time step (per column, the same channel
  would get different scales at different lags). The past values of a target (autoregressive
  windows, ``y[t-k]``) are scaled exactly like that output, so a standardised prediction can be
  fed back as a past value unchanged (free simulation).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..exceptions import DataError
from .table import Table

_TAP = re.compile(r"^(?P<channel>.+)\[t-\d+\]$")


def channel_of(name: str) -> str | None:
    """``'speed[t-3]'`` -> ``'speed'``; None for a column that is not a window tap."""
    m = _TAP.match(str(name))
    return m["channel"] if m else None


def target_names(table: Table) -> list[str]:
    """The target's name(s): multi-output tables join them with commas."""
    return str(table.target_name).split(",")


@dataclass(frozen=True)
class Scaler:
    """Affine standardisation: x' = (x - x_mean) / x_std per column, y' = (y - y_mean) / y_std per
    output (``y_mean``/``y_std`` have one entry per output, also for a single output)."""

    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: np.ndarray
    y_std: np.ndarray

    def x(self, X: np.ndarray) -> np.ndarray:
        return (X - self.x_mean) / self.x_std

    def y(self, y: np.ndarray) -> np.ndarray:
        """Scaled targets, in the shape of ``y``: (n,) for one output, (n, d) for several."""
        if y.ndim == 2:
            return (y - self.y_mean) / self.y_std
        return ((y[:, None] - self.y_mean) / self.y_std)[:, 0]

    def target_stats(self, multi_output: bool):
        """(y_mean, y_std) as ``DataSplits`` records them: floats for a single output, arrays of one
        entry per output otherwise."""
        if multi_output:
            return self.y_mean, self.y_std
        return float(self.y_mean[0]), float(self.y_std[0])


def fit_scaler(
    table: Table,
    train_idx: np.ndarray,
    *,
    standardize_x: bool = True,
    standardize_y: bool | None = None,
    per_channel: bool = False,
) -> Scaler:
    """The scaler of ``table`` fitted on the rows ``train_idx`` (module docstring): features per
    column, or per channel with ``per_channel``; targets per output when ``standardize_y`` (None:
    for regression and sequence tables). A constant training target is a DataError."""
    X, y = table.X, table.y
    Y = y if y.ndim == 2 else y[:, None]
    if standardize_y is None:
        standardize_y = table.task in ("regression", "sequence")
    if standardize_y:
        y_mean, y_std = Y[train_idx].mean(0), Y[train_idx].std(0)
        if np.any(y_std == 0):
            which = "a training target is" if Y.shape[1] > 1 else "the training target is"
            raise DataError(f"dataset '{table.name}': {which} constant")
    else:
        y_mean, y_std = np.zeros(Y.shape[1]), np.ones(Y.shape[1])
    if not standardize_x:
        x_mean, x_std = np.zeros(X.shape[1]), np.ones(X.shape[1])
    elif per_channel:
        x_mean, x_std = _channel_stats(table, train_idx, y_mean, y_std)
    else:
        x_mean, x_std = X[train_idx].mean(0), X[train_idx].std(0)
        x_std = np.where(x_std > 0, x_std, 1.0)
    return Scaler(x_mean, x_std, y_mean, y_std)


def _channel_stats(table: Table, train_idx: np.ndarray, y_mean: np.ndarray, y_std: np.ndarray):
    """Per-channel feature statistics: one mean and std for all taps of a channel (over the training
    windows), the output's own for the past values of an output."""
    X = table.X
    names = target_names(table)
    x_mean, x_std = np.zeros(X.shape[1]), np.ones(X.shape[1])
    channels: dict[str, list[int]] = {}
    for j, name in enumerate(table.feature_names):
        channels.setdefault(channel_of(name) or f"#{j}", []).append(j)
    for ch, cols in channels.items():
        if ch in names:  # past values of an output: the output's own scale
            o = names.index(ch)
            m, s = y_mean[o], y_std[o]
        else:
            vals = X[np.ix_(train_idx, np.asarray(cols))]
            m, s = vals.mean(), vals.std()
            s = s if s > 0 else 1.0
        x_mean[cols], x_std[cols] = m, s
    return x_mean, x_std


__all__ = ["Scaler", "channel_of", "fit_scaler", "target_names"]
