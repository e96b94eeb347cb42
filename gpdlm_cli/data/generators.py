"""Classic synthetic classification sets, generated exactly by their published definitions.

* **twonorm** (Breiman, 1996, "Bias, variance and arcing classifiers"; DELVE twonorm): 20 inputs.
  Class 1 is N(mu, I) with mu = (a, ..., a), class 2 is N(-mu, I), a = 2 / sqrt(20). DELVE's
  version has 7400 cases.
* **ringnorm** (same sources): 20 inputs. Class 1 is N(0, 4 I); class 2 is N(mu, I) with
  mu = (a, ..., a), a = 1 / sqrt(20). 7400 cases.
  For both, each case's class is drawn with probability 1/2 (the definitions give equal priors);
  label 1 = class 1, label 0 = class 2.
* **banana** (PRTools ``gendatb``, Duin et al.): two banana-shaped classes in 2-D, each uniform
  along a circular arc of radius r = 5 plus isotropic Gaussian noise of standard deviation ``s``
  (default 1): class 1 angles ~ U(0.125 pi, 1.375 pi), points r (sin t, cos t) + noise; class 2
  angles ~ U(-0.875 pi, 0.375 pi), points r (sin t, cos t) + noise - (0.75 r, 0.75 r). Class sizes
  are Binomial(n, 1/2). n = 5300 as in the Raetsch benchmark set used by the DLM paper (which was
  itself sampled from a banana generator; its exact file is not reproduced here).

Every generator is a pure function of ``seed`` (numpy's PCG64): same seed, same table.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .catalog import loader
from .table import Table, table_from_frame


def twonorm(n: int = 7400, d: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = 2.0 / np.sqrt(d)
    y = rng.integers(0, 2, size=n)  # 1 = class 1 (mean +a), 0 = class 2 (mean -a)
    X = rng.standard_normal((n, d)) + np.where(y[:, None] == 1, a, -a)
    return X, y.astype(float)


def ringnorm(n: int = 7400, d: int = 20, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    a = 1.0 / np.sqrt(d)
    y = rng.integers(0, 2, size=n)  # 1 = class 1 N(0, 4I), 0 = class 2 N(a, I)
    Z = rng.standard_normal((n, d))
    X = np.where(y[:, None] == 1, 2.0 * Z, Z + a)
    return X, y.astype(float)


def banana(n: int = 5300, s: float = 1.0, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    r = 5.0
    n1 = int(rng.binomial(n, 0.5))
    n2 = n - n1
    t1 = 0.125 * np.pi + rng.random(n1) * 1.25 * np.pi
    a = np.column_stack([r * np.sin(t1), r * np.cos(t1)]) + rng.standard_normal((n1, 2)) * s
    t2 = 0.375 * np.pi - rng.random(n2) * 1.25 * np.pi
    b = np.column_stack([r * np.sin(t2), r * np.cos(t2)]) + rng.standard_normal((n2, 2)) * s - 0.75 * r
    X = np.vstack([a, b])
    y = np.concatenate([np.ones(n1), np.zeros(n2)])
    perm = rng.permutation(n)
    return X[perm], y[perm]


def _table(name: str, X: np.ndarray, y: np.ndarray, source: str) -> Table:
    df = pd.DataFrame(X, columns=[f"x{i + 1}" for i in range(X.shape[1])])
    df["label"] = y
    return table_from_frame(df, name=name, task="classification", target="label", source=source)


@loader("twonorm")
def load_twonorm(info, n: int = 7400, seed: int = 0, missing: str = "drop") -> Table:
    n = int(n)  # its range: the config schema (schema.options)
    return _table(info.name, *twonorm(n, 20, seed), source=f"generator:twonorm(n={n}, seed={seed})")


@loader("ringnorm")
def load_ringnorm(info, n: int = 7400, seed: int = 0, missing: str = "drop") -> Table:
    n = int(n)  # its range: the config schema (schema.options)
    return _table(info.name, *ringnorm(n, 20, seed), source=f"generator:ringnorm(n={n}, seed={seed})")


@loader("banana")
def load_banana(info, n: int = 5300, noise: float = 1.0, seed: int = 0, missing: str = "drop") -> Table:
    n = int(n)  # its range: the config schema (schema.options)
    return _table(info.name, *banana(n, float(noise), seed), source=f"generator:banana(n={n}, seed={seed})")
