"""``aimpeak``: an AIMPEAK-like traffic-speed generator.

The AIMPEAK data (Chen et al., 2012; used by the sparse-spectrum paper, Sec. 5) are 41,850 speed
observations on 775 urban road segments of Singapore over 54 five-minute slots of the morning
peak of 20 April 2011; they are not public. This generator produces data of the same shape and
input space, from an explicit generative model:

1. **Road network.** Intersections on a jittered square grid (block ~250 m, jitter std 40 m). Every
   grid edge is a two-way road; each direction is a *segment*. Every 4th grid line is an
   arterial, the middle horizontal line an expressway, the rest local streets. Segments are taken
   in breadth-first order from the centre of the grid until there are ``n_segments`` (775), so
   the network is connected.
2. **Segment attributes** (the inputs): length (m, from the jittered geometry), lanes (local 1-2,
   arterial 2-4, expressway 3-5), speed limit (local 40/50, arterial 60/70, expressway 80/90
   km/h) and direction (bearing of travel in degrees clockwise from north, [0, 360)).
3. **Spatial correlation.** Two segments are neighbours when they share an intersection (the line
   graph of the network, Laplacian L). Spatial fields are z = normalise((I + tau L)^-1 eps),
   eps ~ N(0, I), tau = 4: a Gaussian Markov random field that is smooth along the network.
4. **Time.** Slot k = 1..54 is 07:00 + 5 (k-1) minutes. Demand D(k) = exp(-(t_k - 08:40)^2 /
   (2 (50 min)^2)) peaks in the morning rush.
5. **Congestion.** c_{s,k} = sigmoid(-2.2 + 3.0 D(k) (1 + 0.3 major_s) + 0.9 z_s + 0.6 w_{s,k}
   - 0.35 (lanes_s - 2)), with a static propensity field z and a spatio-temporal disturbance w
   that is an AR(1) in time (rho = 0.85) of independent spatial fields (step 3).
6. **Speed** (km/h, the target): v = v_free (1 - 0.75 c) + N(0, noise_kmh^2), with free-flow speed
   v_free = limit (0.85 + 0.15 u_s) (1 - 0.25 exp(-length / 150 m)) (short segments lose speed at
   intersections; u_s ~ U(0, 1)); clipped to [3, 1.1 limit].

Rows are (segment, slot) pairs: ``n_segments * n_slots`` (775 * 54 = 41,850). Inputs: length,
lanes, speed_limit, direction, time_slot; target: speed. Fully determined by ``seed``.

**Held-out test rows** (``holdout``; a deviation from the paper's random 95/5 split, for robustness
checks, issue 40). With the random split every test row has its own segment's slots t-1 and t+1 in
the training data almost surely (the four static inputs identify the segment), so the task is
interpolation: the same-segment t+-1 average scores 3.03 km/h, as well as PIC++.
``holdout=segments`` makes whole segments test rows (a share ``holdout_fraction`` of them);
``holdout=slots`` holds out, in every segment, one window of ceil(``holdout_fraction`` * n_slots)
consecutive slots at a random place. The test rows are fixed by ``holdout_seed`` (the run's seed only
shuffles training and validation rows); ``random`` (default) leaves the split to
``dataset.split``.
"""

from __future__ import annotations

from collections import deque

import numpy as np
import pandas as pd
import scipy.sparse as sp
from scipy.sparse.linalg import splu

from .catalog import loader
from .table import Table, table_from_frame

FEATURES = ["length", "lanes", "speed_limit", "direction", "time_slot"]


def road_network(n_segments: int, rng) -> pd.DataFrame:
    """Segments (directed edges) of a jittered grid network, BFS-ordered from the centre."""
    G = 2
    while 4 * G * (G - 1) < n_segments:
        G += 1
    block = 250.0
    pos = np.stack(np.meshgrid(np.arange(G), np.arange(G), indexing="ij"), -1).reshape(-1, 2) * block
    pos = pos + rng.normal(0, 40.0, pos.shape)
    node = lambda i, j: i * G + j  # noqa: E731
    mid = G // 2
    seen = {(mid, mid)}
    queue = deque([(mid, mid)])
    edges: set[tuple[int, int]] = set()
    keep: list[tuple[int, int, str]] = []
    while queue and len(keep) < n_segments:
        i, j = queue.popleft()
        for di, dj in ((1, 0), (-1, 0), (0, 1), (0, -1)):
            a, b = i + di, j + dj
            if not (0 <= a < G and 0 <= b < G):
                continue
            key = (min(node(i, j), node(a, b)), max(node(i, j), node(a, b)))
            if key not in edges:
                edges.add(key)
                if di == 0:  # an east-west edge along grid row i
                    cls = "expressway" if i == mid else ("arterial" if i % 4 == 0 else "local")
                else:  # a north-south edge along grid column j
                    cls = "arterial" if j % 4 == 0 else "local"
                keep.append((node(i, j), node(a, b), cls))  # one segment per direction
                keep.append((node(a, b), node(i, j), cls))
            if (a, b) not in seen:
                seen.add((a, b))
                queue.append((a, b))
    df = pd.DataFrame(keep[:n_segments], columns=["from", "to", "road_class"])
    d = pos[df["to"]] - pos[df["from"]]
    df["length"] = np.hypot(d[:, 0], d[:, 1])
    df["direction"] = np.degrees(np.arctan2(d[:, 1], d[:, 0])) % 360.0  # x = east, y = north
    df["direction"] = (90.0 - df["direction"]) % 360.0  # bearing clockwise from north
    n = len(df)
    lanes = {"local": (1, 2), "arterial": (2, 4), "expressway": (3, 5)}
    limits = {"local": (40, 50), "arterial": (60, 70), "expressway": (80, 90)}
    df["lanes"] = [int(rng.integers(lanes[c][0], lanes[c][1] + 1)) for c in df["road_class"]]
    df["speed_limit"] = [float(rng.choice(limits[c])) for c in df["road_class"]]
    df["major"] = (df["road_class"] != "local").astype(float)
    df["u"] = rng.random(n)
    return df


def _smoother(df: pd.DataFrame, tau: float = 4.0):
    """A factorised (I + tau L) of the segments' line graph (neighbours share an intersection)."""
    n = len(df)
    nodes = np.unique(np.concatenate([df["from"], df["to"]]))
    idx = {v: k for k, v in enumerate(nodes)}
    rows = np.repeat(np.arange(n), 2)
    cols = np.array([[idx[a], idx[b]] for a, b in zip(df["from"], df["to"])]).ravel()
    B = sp.csr_matrix((np.ones(2 * n), (rows, cols)), shape=(n, len(nodes)))
    A = (B @ B.T).tocsr()
    A.setdiag(0)
    A.eliminate_zeros()
    A.data[:] = 1.0
    L = sp.diags(np.asarray(A.sum(1)).ravel()) - A
    lu = splu((sp.identity(n) + tau * L).tocsc())

    def field(rng):
        z = lu.solve(rng.standard_normal(n))
        return (z - z.mean()) / (z.std() + 1e-12)

    return field, A


def generate(n_segments: int = 775, n_slots: int = 54, seed: int = 0, noise_kmh: float = 2.0):
    """The AIMPEAK-like frame (one row per segment and slot) and the segment adjacency matrix."""
    rng = np.random.default_rng(seed)
    net = road_network(n_segments, rng)
    field, A = _smoother(net)
    z = field(rng)
    minutes = 7 * 60 + 5 * np.arange(n_slots)
    D = np.exp(-((minutes - (8 * 60 + 40)) ** 2) / (2 * 50.0**2))
    w = field(rng)
    speeds = np.empty((n_segments, n_slots))
    lanes = net["lanes"].to_numpy(float)
    major = net["major"].to_numpy()
    limit = net["speed_limit"].to_numpy()
    v_free = limit * (0.85 + 0.15 * net["u"].to_numpy()) * (1 - 0.25 * np.exp(-net["length"].to_numpy() / 150.0))
    rho = 0.85
    for k in range(n_slots):
        if k:
            w = rho * w + np.sqrt(1 - rho**2) * field(rng)
        c = 1 / (1 + np.exp(-(-2.2 + 3.0 * D[k] * (1 + 0.3 * major) + 0.9 * z + 0.6 * w - 0.35 * (lanes - 2))))
        v = v_free * (1 - 0.75 * c) + rng.normal(0, noise_kmh, n_segments)
        speeds[:, k] = np.clip(v, 3.0, 1.1 * limit)
    seg = np.repeat(np.arange(n_segments), n_slots)
    slot = np.tile(np.arange(1, n_slots + 1), n_segments)
    df = pd.DataFrame(
        {
            "segment": seg,
            "length": net["length"].to_numpy()[seg],
            "lanes": lanes[seg],
            "speed_limit": limit[seg],
            "direction": net["direction"].to_numpy()[seg],
            "time_slot": slot.astype(float),
            "speed": speeds.ravel(),
        }
    )
    return df, A


HOLDOUTS = ("random", "segments", "slots")


def holdout_mask(segment: np.ndarray, slot: np.ndarray, kind: str, fraction: float, seed: int) -> np.ndarray | None:
    """The fixed test rows of ``holdout`` (module docstring) for rows (segment, slot 1..n_slots); None for
    ``random``."""
    if kind == "random":
        return None
    rng = np.random.default_rng(seed)
    segments = np.unique(segment)
    if kind == "segments":
        k = max(1, int(round(fraction * segments.size)))
        return np.isin(segment, rng.choice(segments, size=k, replace=False))
    n_slots = int(slot.max())
    width = min(n_slots, max(1, int(np.ceil(fraction * n_slots))))
    start = dict(zip(segments, rng.integers(1, n_slots - width + 2, size=segments.size)))
    first = np.array([start[s] for s in segment])
    return (slot >= first) & (slot < first + width)


@loader("aimpeak")
def load_aimpeak(
    info,
    n_segments: int = 775,
    n_slots: int = 54,
    noise_kmh: float = 2.0,
    seed: int = 0,
    missing: str = "drop",
    holdout: str = "random",
    holdout_fraction: float = 0.05,
    holdout_seed: int = 0,
) -> Table:
    """The generated traffic speeds (module docstring); the options' types and ranges are the config
    schema's (``schema.options.AimpeakOptions``)."""
    df, _ = generate(n_segments, n_slots, seed, float(noise_kmh))
    mask = holdout_mask(
        df["segment"].to_numpy(), df["time_slot"].to_numpy(), holdout, float(holdout_fraction), int(holdout_seed)
    )
    where = "" if mask is None else f", holdout={holdout}"
    return table_from_frame(
        df,
        name=info.name,
        task="regression",
        target="speed",
        features=FEATURES,
        missing=missing,
        test_mask=mask,
        source=f"generator:aimpeak(n_segments={n_segments}, seed={seed}{where})",
    )
