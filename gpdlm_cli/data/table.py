"""A loaded dataset before splitting: a numeric design matrix, a target, and what they mean."""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..exceptions import DataError

if TYPE_CHECKING:  # numpy and pandas are imported where a table is made (``gpdlm datasets list`` needs neither)
    import numpy as np
    import pandas as pd

log = logging.getLogger("gpdlm.data")

TASKS = ("regression", "classification", "count", "sequence")


@dataclass
class Table:
    """X (n x d, float64), y (n,), column names, and the task the target belongs to."""

    name: str
    task: str
    X: np.ndarray
    y: np.ndarray
    feature_names: list[str]
    target_name: str
    notes: list[str] = field(default_factory=list)
    # Rows that must form the test set (sequence data: the test trip / the later part of a series),
    # or None for a random split. make_splits honours it.
    test_mask: np.ndarray | None = None
    # Published fixed test sets (n x K bool, column k = the test rows of split k; the uci_datasets
    # 90/10 masks have K = 10), used only when a split asks for one (dataset.split.mask=k).
    test_masks: np.ndarray | None = None

    @property
    def n(self) -> int:
        return self.X.shape[0]

    def fingerprint(self) -> str:
        """SHA-256 (first 16 hex digits) of X and y: identifies the exact data a run saw."""
        import numpy as np

        h = hashlib.sha256()
        h.update(np.ascontiguousarray(self.X, dtype=np.float64).tobytes())
        h.update(np.ascontiguousarray(self.y, dtype=np.float64).tobytes())
        return h.hexdigest()[:16]


def _raise_stray_cells(where: str, column: pd.Series, name: str, remedy: str | None) -> None:
    """A mostly numeric column with a few text cells: name the first bad row and value (a typo in
    the data is likelier than a categorical column), then the remedy."""
    import pandas as pd

    num = pd.to_numeric(column, errors="coerce")
    stray = column[num.isna()]
    if 0 < len(stray) < len(column):
        hint = f"fix the data, or declare '{name}' categorical if it is one" if remedy else "fix the data"
        raise DataError(
            f"{where}: column '{name}' has the non-numeric value {stray.iloc[0]!r} in row "
            f"{stray.index[0]} ({len(stray)} such cell{'s' if len(stray) > 1 else ''}); {hint}"
        )


def _raise_non_finite(where: str, df: pd.DataFrame, columns: list) -> None:
    """An inf or -inf cell in a numeric column: name its column and row (pandas reads "inf" as a
    number; NaN cells are missing values, handled by ``missing``)."""
    import numpy as np
    import pandas as pd

    for col in columns:
        values = df[col]
        if not pd.api.types.is_float_dtype(values):
            continue
        bad = np.isinf(values.to_numpy(dtype=np.float64))
        if bad.any():
            n = int(bad.sum())
            raise DataError(
                f"{where}: column '{col}' has the non-finite value {float(values[bad].iloc[0]):g} in row "
                f"{values.index[bad][0]} ({n} such cell{'s' if n > 1 else ''}); fix the data (leave a "
                f"missing value empty: dataset.missing=drop drops its row)"
            )


DROP_WARN_FRACTION = 0.5  # dropping more than this share of the rows is a console warning


def warn_dropped(where: str, n_dropped: int, n_rows: int) -> None:
    """Rows dropped for missing values: an INFO line in the log, a console warning when more than
    half of the rows go."""
    level = logging.WARNING if n_dropped > DROP_WARN_FRACTION * n_rows else logging.INFO
    log.log(level, "%s: dropped %d of %d rows with missing values (dataset.missing=drop)", where, n_dropped, n_rows)


def _selected_features(df: pd.DataFrame, where: str, target: str, features, missing: str) -> list:
    """The feature columns (``features``, default all but the target), checked to exist, after the
    frame is checked to be non-empty with a target column and ``missing`` to be a known policy."""
    if df.shape[0] == 0:
        raise DataError(f"{where} is empty")
    if target not in df.columns:
        raise DataError(f"{where} has no target column '{target}'; columns: {list(df.columns)}")
    features = [c for c in (features or df.columns) if c != target]
    missing_cols = [c for c in features if c not in df.columns]
    if missing_cols:
        raise DataError(f"{where} lacks feature columns {missing_cols}")
    if missing not in ("drop", "error"):
        raise DataError(f"dataset.missing must be 'drop' or 'error'; got {missing!r}")
    return features


def _drop_missing(df: pd.DataFrame, where: str, missing: str, test_mask, test_masks, notes: list):
    """``(df, test_mask, test_masks)``: the rows with a missing value dropped (from the masks
    too; a note and a log line say how many), or a DataError under ``missing='error'``; then at least
    two rows must remain."""
    import numpy as np

    bad = df.isna().any(axis=1).to_numpy()
    n_bad = int(bad.sum())
    if n_bad:
        if missing == "error":
            raise DataError(f"{where} has {n_bad} rows with missing values (dataset.missing=error)")
        df = df.loc[~bad]
        if test_mask is not None:
            test_mask = np.asarray(test_mask, dtype=bool)[~bad]
        if test_masks is not None:
            test_masks = np.asarray(test_masks, dtype=bool)[~bad]
        notes.append(f"dropped {n_bad} of {len(bad)} rows with missing values")
        warn_dropped(where, n_bad, len(bad))
    if df.shape[0] == 0:
        raise DataError(f"{where} is empty after dropping rows with missing values")
    if df.shape[0] == 1:
        after = f" (after dropping {n_bad} with missing values)" if n_bad else ""
        raise DataError(f"{where} has only 1 row{after}; a model needs at least 2 rows to learn from")
    return df, test_mask, test_masks


def _design_matrix(df: pd.DataFrame, where: str, features: list, categorical, target: str) -> pd.DataFrame:
    """X as floats: numeric and boolean features as they are, categorical ones dummy-coded with L-1
    columns (DLM paper, App. D); a text column not declared categorical, or an infinite cell in a
    numeric column (or the target), is a DataError naming it."""
    import pandas as pd

    for col in features:
        if (
            col not in categorical
            and not pd.api.types.is_numeric_dtype(df[col])
            and not pd.api.types.is_bool_dtype(df[col])
        ):
            _raise_stray_cells(where, df[col], col, "categorical")
            raise DataError(
                f"{where}: column '{col}' is not numeric and not declared categorical "
                f"(add it to the dataset's categorical list)"
            )
    _raise_non_finite(where, df, [c for c in features if c not in categorical] + [target])
    cats = [c for c in features if c in categorical]
    return (
        pd.get_dummies(df[features], columns=cats, drop_first=True, dtype=float) if cats else df[features].astype(float)
    )


def _target_values(df: pd.DataFrame, where: str, target: str, task: str) -> np.ndarray:
    """y (float64), checked for its task: numeric; not constant (regression, count); labels in {0, 1}
    (classification); non-negative integers (count)."""
    import numpy as np
    import pandas as pd

    y = pd.to_numeric(df[target], errors="coerce")
    if y.isna().any():
        _raise_stray_cells(where, df[target], target, None)
        raise DataError(f"{where}: target column '{target}' is not numeric")
    y = y.to_numpy(dtype=np.float64)
    if task in ("regression", "count") and np.ptp(y) == 0:
        raise DataError(
            f"{where}: target '{target}' is constant ({float(y[0]):g} in all {y.size} rows); nothing to learn"
        )
    if task == "classification":
        labels = np.unique(y)
        if not np.all(np.isin(labels, (0.0, 1.0))):
            raise DataError(f"{where}: classification labels must be in {{0, 1}}; found {labels[:5].tolist()}")
    if task == "count" and (np.any(y < 0) or np.any(y != np.round(y))):
        raise DataError(f"{where}: count targets must be non-negative integers")
    return y


def table_from_frame(
    df: pd.DataFrame,
    *,
    name: str,
    task: str,
    target: str,
    features: list[str] | None = None,
    categorical: list[str] | tuple = (),
    missing: str = "drop",
    source: str = "",
    label_map: dict | None = None,
    test_mask: np.ndarray | None = None,
    test_masks: np.ndarray | None = None,
) -> Table:
    """Turn a DataFrame into a Table: select columns, dummy-code categoricals with L-1 columns
    (DLM paper, App. D), handle missing values, and reject what cannot be modelled.

    ``missing='drop'`` drops incomplete rows and records the count in ``notes`` (and the log);
    ``'error'`` fails. ``label_map`` maps raw target values (e.g. {-1: 0, 1: 1} or {'M': 1, 'B': 0})
    before the checks; ``test_mask`` (aligned with ``df``) marks rows that must be test rows;
    ``test_masks`` (n x K, aligned with ``df``) are published fixed test sets, one per column.
    ``source`` (a file path or package reference) is named in every error."""
    import numpy as np

    where = f"dataset '{name}'" + (f" ({source})" if source else "")
    features = _selected_features(df, where, target, features, missing)
    df = df[features + [target]]
    if label_map:
        df = df.assign(**{target: df[target].map(lambda v: label_map.get(v, v))})
    notes: list[str] = []
    df, test_mask, test_masks = _drop_missing(df, where, missing, test_mask, test_masks, notes)
    X = _design_matrix(df, where, features, categorical, target)
    y = _target_values(df, where, target, task)
    return Table(
        name,
        task,
        X.to_numpy(dtype=np.float64),
        y,
        [str(c) for c in X.columns],
        target,
        notes,
        test_mask=None if test_mask is None else np.asarray(test_mask, dtype=bool),
        test_masks=None if test_masks is None else np.asarray(test_masks, dtype=bool),
    )
