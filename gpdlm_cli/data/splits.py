"""Train/validation/test splits: which rows train, validate and test (the random, published-mask
and chronological row rules and the dispatch between them). How the rows are scaled (training
statistics only) is ``scaling.py``."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..exceptions import DataError, param_error
from .scaling import fit_scaler
from .table import Table

N_MASKS = 10  # the uci_datasets collection publishes ten 90/10 test masks per set


@dataclass
class DataSplits:
    """Standardised arrays; ``y_mean``/``y_std`` undo the target scaling (0/1 if not scaled): floats
    for a single output, arrays of one entry per output for a multi-output table (y of shape (n, d))."""

    name: str
    task: str
    X_train: np.ndarray
    y_train: np.ndarray
    X_val: np.ndarray
    y_val: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    x_mean: np.ndarray
    x_std: np.ndarray
    y_mean: float | np.ndarray
    y_std: float | np.ndarray
    fingerprint: str
    feature_names: list
    notes: list = field(default_factory=list)
    indices: dict = field(default_factory=dict)  # row numbers of the Table: {"train", "val", "test"}

    @property
    def n_train(self) -> int:
        return self.X_train.shape[0]


def make_splits(
    table: Table,
    *,
    seed: int,
    val_fraction: float = 0.08,
    test_fraction: float = 0.25,
    train_size: int | None = None,
    test_size: int | None = None,
    standardize_x: bool = True,
    standardize_y: bool | None = None,
    mask: int | None = None,
    mask_val_fraction: float = 0.0,
) -> DataSplits:
    """Shuffle with ``seed``; take the test set (``test_size`` rows, else ``test_fraction``), the
    validation set (``val_fraction`` of all rows), and the rest for training, subsampled to
    ``train_size`` if given. Defaults are the DLM paper's regression protocol 67/8/25 (App. D).

    Classification/count protocol (DLM App. D): ``train_size`` chosen (<= 2000), 10% validation,
    and *up to* ``test_size`` test rows from what remains: when ``train_size`` and ``test_size``
    are both given and do not fit, the test set shrinks (recorded in ``notes``); a training size
    that does not fit is an error. Tables with a ``test_mask`` take their test rows from the mask
    (``test_size`` subsamples it) and draw validation and training rows from the other rows only;
    for sequence tables (the test trip or the later part of a series) all three sets keep their
    time order (:func:`_chronological_rows`) and features are scaled per channel.

    Published fixed splits (``mask=k``, tables with ``test_masks``: the uci_datasets 90/10 masks):
    the test rows are exactly those of mask ``k`` (in file order; ``test_size`` subsamples them),
    every other row trains, and no validation rows are carved out unless
    ``mask_val_fraction`` > 0 asks for that share of the training rows. ``val_fraction`` and
    ``test_fraction`` do not apply; ``train_size`` subsamples the training rows. The seed then only
    orders the training rows (and draws any subsample), so every seed sees the same test set.

    Features (and regression targets, per output) are standardised with training statistics only
    (``scaling.fit_scaler``)."""
    check_mask_value(mask, mask_val_fraction)
    if mask is not None:
        rows = _mask_rows(table, int(mask), mask_val_fraction, train_size, test_size, seed)
        return _finish(table, *rows, standardize_x=standardize_x, standardize_y=standardize_y)
    for nm, v in (("val_fraction", val_fraction), ("test_fraction", test_fraction)):
        if not (0 <= v < 1):
            raise param_error(nm, "dataset.split", "a float in [0, 1)", v)
    for nm, size in (("train_size", train_size), ("test_size", test_size)):
        if size is not None and (isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 0):
            raise param_error(nm, "dataset.split", "a non-negative integer or null", size)
    if table.n == 0:
        raise DataError(f"dataset '{table.name}' is empty")
    if table.test_mask is not None and table.task == "sequence":  # time order, per-channel scaling
        rows = _chronological_rows(table, val_fraction, train_size, test_size)
        return _finish(table, *rows, standardize_x=standardize_x, standardize_y=standardize_y, per_channel=True)
    rows = _random_rows(table, seed, val_fraction, test_fraction, train_size, test_size)
    return _finish(table, *rows, standardize_x=standardize_x, standardize_y=standardize_y)


def _random_rows(table: Table, seed: int, val_fraction: float, test_fraction: float, train_size, test_size):
    """Shuffled rows: test, validation and training (make_splits' docstring); a fixed test part
    (``table.test_mask``) gives the test rows, the others are shuffled into validation and training."""
    n = table.n
    notes: list[str] = []
    rng = np.random.default_rng(seed)
    if table.test_mask is not None:
        fixed = np.asarray(table.test_mask, dtype=bool)
        pool_test = rng.permutation(np.flatnonzero(fixed))
        pool = rng.permutation(np.flatnonzero(~fixed))
        if test_size:
            pool_test = pool_test[: int(test_size)]
        test_idx = pool_test
        n_val = int(round(val_fraction * pool.size))
        val_idx, train_idx = pool[:n_val], pool[n_val:]
        n_rest = train_idx.size
        n_test = test_idx.size
        if n_test == 0:
            raise DataError(f"dataset '{table.name}' has no test rows in its fixed (sequence) test part")
        notes.append(f"fixed test part: {n_test} rows; train/validation drawn from the other {pool.size} rows")
    else:
        n_val = int(round(val_fraction * n))
        n_test = int(test_size) if test_size else int(round(test_fraction * n))
        if train_size is not None and test_size and n_test + n_val + train_size > n:
            shrunk = n - n_val - int(train_size)
            if shrunk >= 1:
                notes.append(
                    f"test set reduced from {n_test} to {shrunk} rows (up to test_size after "
                    f"train_size={train_size} and {n_val} validation rows)"
                )
                n_test = shrunk
        n_rest = n - n_test - n_val
        perm = rng.permutation(n)
        test_idx, val_idx, train_idx = perm[:n_test], perm[n_test : n_test + n_val], perm[n_test + n_val :]
    if n_rest < 2:
        raise DataError(
            f"dataset '{table.name}' ({n} rows) leaves {n_rest} training rows after the test/validation split"
        )
    train_idx = first_train_rows(
        train_idx, train_size, table.name, f"rows left for training after test ({n_test}) and validation ({n_val})"
    )
    return train_idx, val_idx, test_idx, notes


def _chronological_rows(table: Table, val_fraction: float, train_size, test_size):
    """Rows of a sequence table in time order (GP-LSTM paper, Sec. 5.2.3). Windows of one series
    overlap (neighbours share all but one step), so random validation rows would have near-copies
    among the training rows, and the test rows must stay in time order for free simulation and
    per-horizon errors:

    * **test**: the table's fixed test part (``test_mask``: the test trip, or the later part of a
      series), in time order (``test_size`` keeps its first rows);
    * **validation**: the last ``val_fraction`` of the training span ("25% of the training data
      used for validation", Sec. 5.2.3), in time order;
    * **training**: the windows before it, in time order (``train_size`` keeps the first rows)."""
    mask = np.asarray(table.test_mask, dtype=bool)
    test_idx = np.flatnonzero(mask)
    pool = np.flatnonzero(~mask)
    if test_idx.size == 0:
        raise DataError(f"dataset '{table.name}' has no test rows in its fixed (sequence) test part")
    if test_size:
        test_idx = test_idx[: int(test_size)]
    n_val = int(round(val_fraction * pool.size))
    train_idx, val_idx = pool[: pool.size - n_val], pool[pool.size - n_val :]
    if train_idx.size < 2:
        raise DataError(
            f"dataset '{table.name}' ({table.n} rows) leaves {train_idx.size} training rows after "
            f"the chronological validation block ({n_val} rows)"
        )
    train_idx = first_train_rows(
        train_idx, train_size, table.name, f"training windows before its validation block ({n_val})"
    )
    notes = [
        f"chronological split: {train_idx.size} training, {val_idx.size} validation (the last "
        f"{val_fraction:g} of the training span), {test_idx.size} test windows, all in time order; "
        f"features standardised per channel"
    ]
    return train_idx, val_idx, test_idx, notes


def check_mask_value(mask, mask_val_fraction=0.0, n_masks: int = N_MASKS) -> None:
    """Range checks of ``dataset.split.mask`` / ``mask_val_fraction`` (need no data)."""
    if mask is not None and (
        isinstance(mask, bool) or not isinstance(mask, (int, np.integer)) or not 0 <= mask < n_masks
    ):
        raise param_error(
            "mask",
            "dataset.split",
            f"an integer in 0..{n_masks - 1} (one of the {n_masks} published test masks) or null",
            mask,
        )
    if (
        isinstance(mask_val_fraction, bool)
        or not isinstance(mask_val_fraction, (int, float))
        or not 0 <= mask_val_fraction < 1
    ):
        raise param_error("mask_val_fraction", "dataset.split", "a float in [0, 1)", mask_val_fraction)


def sets_with_masks() -> list[str]:
    """Registry names whose tables carry published test masks (``dataset.split.mask`` applies)."""
    from .registry import all_datasets

    return [
        n + (" (dataset.source=download)" if i.mask_source == "alt_files" else "")
        for n, i in all_datasets().items()
        if i.mask_source
    ]


def no_masks_error(name: str, mask) -> DataError:
    return DataError(
        f"dataset.split.mask={mask}: dataset '{name}' has no published test masks; "
        f"the sets that have them: {', '.join(sets_with_masks())}"
    )


def check_split(name: str, split: dict, options: dict | None = None) -> None:
    """Check ``dataset.split`` against the registry before anything is fetched or parsed: a mask
    index outside 0..9 or a mask on a set (or source) without masks is a one-line error."""
    from .registry import get_dataset_info

    mask = split.get("mask")
    check_mask_value(mask, split.get("mask_val_fraction", 0.0))
    if mask is None:
        return
    info = get_dataset_info(name)
    source = (options or {}).get("source", "package")
    if info.mask_source is None or (info.mask_source == "alt_files" and source != "download"):
        raise no_masks_error(name, mask)


def first_train_rows(train_idx: np.ndarray, train_size, dataset: str, what: str) -> np.ndarray:
    """``train_idx[:train_size]`` (all of it for None); a DataError naming the ``what`` there are too
    few of when ``train_size`` is < 2 or above ``train_idx.size``."""
    if train_size is None:
        return train_idx
    if train_size < 2:
        raise DataError(
            f"dataset.split.train_size={train_size}: a training set needs at least 2 rows "
            f"(null = all {train_idx.size} {what})"
        )
    if train_size > train_idx.size:
        raise DataError(
            f"dataset.split.train_size={train_size} but dataset '{dataset}' has only {train_idx.size} {what}"
        )
    return train_idx[: int(train_size)]


def _mask_rows(table: Table, k: int, mask_val_fraction: float, train_size, test_size, seed):
    masks = table.test_masks
    if masks is None:
        raise no_masks_error(table.name, k)
    if k >= masks.shape[1]:
        raise param_error("mask", "dataset.split", f"an integer in 0..{masks.shape[1] - 1}", k)
    for nm, v in (("train_size", train_size), ("test_size", test_size)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0):
            raise param_error(nm, "dataset.split", "a non-negative integer or null", v)
    rng = np.random.default_rng(seed)
    test_idx = np.flatnonzero(masks[:, k])
    if test_idx.size == 0:
        raise DataError(f"dataset '{table.name}': published test mask {k} selects no rows")
    if test_size:
        test_idx = np.sort(rng.choice(test_idx, size=min(int(test_size), test_idx.size), replace=False))
    pool = rng.permutation(np.flatnonzero(~masks[:, k]))
    n_val = int(round(mask_val_fraction * pool.size))
    val_idx, train_idx = pool[:n_val], pool[n_val:]
    if train_idx.size < 2:
        raise DataError(
            f"dataset '{table.name}' ({table.n} rows) leaves {train_idx.size} training rows outside "
            f"test mask {k} and {val_idx.size} validation rows"
        )
    train_idx = first_train_rows(train_idx, train_size, table.name, f"training rows outside test mask {k}")
    notes = [
        f"published test mask {k} of {masks.shape[1]}: {test_idx.size} test rows, {train_idx.size} training, "
        f"{val_idx.size} validation"
    ]
    return train_idx, val_idx, test_idx, notes


def _finish(
    table: Table, train_idx, val_idx, test_idx, notes, *, standardize_x: bool, standardize_y, per_channel: bool = False
) -> DataSplits:
    """Scale with training statistics only (``scaling.fit_scaler``) and assemble the DataSplits."""
    scaler = fit_scaler(
        table, train_idx, standardize_x=standardize_x, standardize_y=standardize_y, per_channel=per_channel
    )
    X, y = table.X, table.y
    y_mean, y_std = scaler.target_stats(multi_output=y.ndim == 2)
    return DataSplits(
        table.name,
        table.task,
        scaler.x(X[train_idx]),
        scaler.y(y[train_idx]),
        scaler.x(X[val_idx]),
        scaler.y(y[val_idx]),
        scaler.x(X[test_idx]),
        scaler.y(y[test_idx]),
        scaler.x_mean,
        scaler.x_std,
        y_mean,
        y_std,
        table.fingerprint(),
        table.feature_names,
        notes=notes,
        indices={"train": train_idx, "val": val_idx, "test": test_idx},
    )
