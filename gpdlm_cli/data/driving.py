"""``driving``: a vehicle-kinematics simulator for the GP-LSTM paper's self-driving tasks.

The real data (two comma.ai trips sampled at 10 ms) are proprietary; this simulator produces
trips of the same kind, each from its own seed, so training and test trips never share a road.

Generative model (time step dt = 10 ms):

* **Road.** Curvature along the arc length s is an Ornstein-Uhlenbeck process in s (correlation
  length 250 m, stationary std 1/600 m^-1) plus occasional sharp bends (|kappa| up to 1/80 m^-1,
  80-200 m long). Lane width W = 3.7 m.
* **Speed.** The driver's desired speed is piecewise constant per 40-90 s leg (one of 9, 13, 20,
  27, 31 m/s, i.e. ~20-70 mph), includes stops (0 m/s for 10-25 s), is smoothed with a 4 s
  first-order filter and capped ahead of bends by sqrt(2.5 m/s^2 / max |kappa| over the next 120 m). Longitudinal control
  is ACC-like: a_cmd = min(0.6 (min(v_ref, cap) - v), 0.25 (d - 5 - 1.6 v) + 0.6 (v_lead - v)) (the second
  term only while a lead vehicle is within 120 m), clipped to [-5, 2] m/s^2, through a 0.3 s actuator
  lag; v >= 0.
* **Lead vehicle.** Drives at its own desired speed (the ego leg speed + an OU deviation, std 2 m/s);
  the gap d evolves by d' = v_lead - v; when it exceeds 180 m a new lead appears at 40-80 m.
* **Lateral.** Kinematic bicycle (wheelbase 2.7 m): yaw rate r = v tan(delta) / 2.7, heading
  error e_psi' = r - v kappa, lateral offset e_y' = v sin(e_psi). The driver steers
  delta = atan(2.7 kappa) - 0.8 e_psi - atan(0.6 e_y / (v + 1)) + OU steering noise (std 0.004 rad,
  1.5 s correlation) through a 0.15 s lag (a Stanley-type lane keeper); e_y is kept within +-1.5 m.
* **Sensors**, all at 10 ms: GPS velocity in ENU (3 axes; 10 Hz updates held in between, noise
  std 0.15 m/s), fiber gyro (3 axes: roll/pitch rate noise, yaw rate r + slowly drifting bias
  + noise 0.003 rad/s), compass (unit heading vector + vertical component, noise 0.02),
  accelerometer (3 axes: a, v r, g), steering wheel angle (ratio 15, noise 0.002 rad),
  speedometer (1.5 % scale error + noise 0.03 m/s), lanes (left and right boundary y-offsets in
  the car frame at 7 look-ahead points x = 0, 10, ..., 60 m:
  y = +-W/2 - e_y - tan(e_psi) x + kappa x^2 / 2, noise growing with x), and the lead vehicle
  position in the car frame (x = d, y = -e_y - tan(e_psi) d + kappa d^2 / 2, noise 0.2 / 0.1 m).

Tasks (GP-LSTM paper, Sec. 5 and App. D):

* ``speed``: speedometer speed from GPS velocity (3) and gyro (3).
* ``yaw``: gyro yaw rate from speed and steering angle.
* ``lanes``: one lane point (``output``, default ``lane_left_y3``, 30 m ahead) from GPS velocity,
  gyro, compass, steering and the other 13 lane points at the previous steps.
* ``lead``: the lead vehicle's distance ``lead_x`` (or ``lead_y`` with ``output``) from GPS
  velocity, gyro, compass, steering and the other coordinate at the previous steps.
* ``output=all`` (lanes, lead): every output at once, as the paper models them (all 14 lane
  points; both lead coordinates): a multi-output table, y of shape (n, d), whose autoregressive
  windows hold the past values of every output. Recurrent models fit independent GPs (or linear
  outputs) sharing one network.

A window holds ``lag`` steps (default 128 = 1.28 s, as in the paper) of which every ``lag_step``-th
is kept, and every ``stride``-th window is a row.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..exceptions import DataError
from .catalog import loader
from .sequences import windows_table
from .table import Table

DT = 0.01
WHEELBASE = 2.7
LANE_W = 3.7
LOOKAHEAD = np.arange(0.0, 61.0, 10.0)  # 7 lane points
GPS = ["gps_ve", "gps_vn", "gps_vu"]
GYRO = ["gyro_x", "gyro_y", "gyro_z"]
COMPASS = ["compass_x", "compass_y", "compass_z"]
ACC = ["acc_x", "acc_y", "acc_z"]
LANES = [f"lane_left_y{k}" for k in range(7)] + [f"lane_right_y{k}" for k in range(7)]


def _ou(rng, n, dt, tau, std):
    """Ornstein-Uhlenbeck samples on a regular grid (exact discretisation)."""
    phi = np.exp(-dt / tau)
    e = rng.standard_normal(n) * std * np.sqrt(1 - phi * phi)
    x = np.empty(n)
    x[0] = rng.standard_normal() * std
    for i in range(1, n):
        x[i] = phi * x[i - 1] + e[i]
    return x


def _road(rng, length_m: float) -> np.ndarray:
    """Curvature on a 1 m arc-length grid."""
    n = int(length_m) + 2
    kappa = _ou(rng, n, 1.0, 250.0, 1 / 600)
    s = 0
    while s < n:
        s += int(rng.integers(300, 1500))
        ln = int(rng.integers(80, 200))
        if s + ln < n:
            k = rng.uniform(1 / 300, 1 / 80) * rng.choice([-1, 1])
            ramp = np.sin(np.linspace(0, np.pi, ln)) ** 2
            kappa[s : s + ln] += k * ramp
    return kappa


def _speed_legs(rng, T: int) -> np.ndarray:
    """The driver's desired speed at each step: legs of 40-90 s at 9-31 m/s, with stops of 10-25 s."""
    legs = np.empty(T)
    t = 0
    while t < T:
        if rng.random() < 0.15:
            span, speed = int(rng.uniform(10, 25) / DT), 0.0
        else:
            span, speed = int(rng.uniform(40, 90) / DT), float(rng.choice([9.0, 13.0, 20.0, 27.0, 31.0]))
        legs[t : t + span] = speed
        t += span
    return legs


#: the true state the drive simulates, one column each
_STATE = ("v", "a", "r", "delta", "psi", "e_y", "e_psi", "kappa", "d", "v_lead", "x", "y")


def _drive(rng, kappa_s: np.ndarray, legs: np.ndarray, steer_noise: np.ndarray, lead_dev: np.ndarray) -> dict:
    """The true state (``_STATE``: speed, acceleration, yaw rate, steering angle, heading, lateral and
    heading errors to the lane, road curvature, gap to and speed of the lead vehicle, position) at each
    step: one explicit-Euler simulation of a kinematic bicycle following the road and the desired
    speed, capped before bends, and a lead vehicle (re-placed 40-80 m ahead when lost)."""
    T = len(legs)
    v = legs[0] * 0.5
    a = 0.0
    delta = 0.0
    psi = e_y = e_psi = s = x = y = 0.0
    v_ref = v
    d = 60.0
    v_lead = v
    alpha_ref = DT / 4.0
    kappa_l, n_k = kappa_s.tolist(), len(kappa_s)
    # the driver sees bends coming: speed cap from the largest |curvature| over the next 120 m
    ahead = pd.Series(np.abs(kappa_s[::-1])).rolling(120, min_periods=1).max().to_numpy()[::-1]
    cap_l = np.sqrt(2.5 / np.maximum(ahead, 1e-6)).tolist()
    legs_l, steer_l, dev_l = legs.tolist(), steer_noise.tolist(), lead_dev.tolist()
    rows = []
    for i in range(T):
        kap = kappa_l[min(int(s), n_k - 1)]
        cap = cap_l[min(int(s), n_k - 1)]
        v_ref += alpha_ref * (legs_l[i] - v_ref)
        a_cmd = 0.6 * (min(v_ref, cap) - v)
        if d < 120.0:
            a_cmd = min(a_cmd, 0.25 * (d - 5.0 - 1.6 * v) + 0.6 * (v_lead - v))
        a_cmd = min(max(a_cmd, -5.0), 2.0)
        a += DT / 0.3 * (a_cmd - a)
        v = max(v + a * DT, 0.0)
        if v == 0.0 and a < 0:
            a = 0.0
        # lead vehicle
        v_lead_ref = max(legs_l[i] + dev_l[i], 0.0)
        v_lead += DT / 2.0 * (min(v_lead_ref, cap) - v_lead)
        d += (v_lead - v) * DT
        if d > 180.0 or d < 3.0:
            d = float(rng.uniform(40, 80))
            v_lead = v
        # lateral
        delta_cmd = math.atan(WHEELBASE * kap) - 0.8 * e_psi - math.atan(0.6 * e_y / (v + 1.0)) + steer_l[i]
        delta += DT / 0.15 * (delta_cmd - delta)
        r = v * math.tan(delta) / WHEELBASE
        e_psi += (r - v * kap) * DT
        e_y += v * math.sin(e_psi) * DT
        e_y = min(max(e_y, -1.5), 1.5)
        psi += r * DT
        s += v * math.cos(e_psi) * DT
        x += v * math.cos(psi) * DT
        y += v * math.sin(psi) * DT
        rows.append((v, a, r, delta, psi, e_y, e_psi, kap, d, v_lead, x, y))
    arr = np.array(rows)
    return {k: arr[:, j] for j, k in enumerate(_STATE)}


def _sensors(rng, out: dict, gyro_bias: np.ndarray) -> pd.DataFrame:
    """Every sensor channel (GPS at 10 Hz, gyroscope with drifting bias, compass, accelerometer,
    steering, wheel speed, lane lines at ``LOOKAHEAD``, the lead vehicle) from the true state ``out``,
    with the truth columns appended. Noise is drawn from ``rng`` channel by channel, in column order."""
    T = len(out["v"])
    v_s, a_s, r_s, psi_s = out["v"], out["a"], out["r"], out["psi"]
    n = lambda std, size=T: rng.standard_normal(size) * std  # noqa: E731
    hold = (np.arange(T) // 10) * 10  # 10 Hz GPS
    df = pd.DataFrame(
        {
            "time_s": np.arange(T) * DT,
            "gps_ve": (v_s * np.cos(psi_s))[hold] + n(0.15)[hold],
            "gps_vn": (v_s * np.sin(psi_s))[hold] + n(0.15)[hold],
            "gps_vu": n(0.1)[hold],
            "gyro_x": n(0.003),
            "gyro_y": n(0.003),
            "gyro_z": r_s + gyro_bias + n(0.003),
            "compass_x": np.cos(psi_s) + n(0.02),
            "compass_y": np.sin(psi_s) + n(0.02),
            "compass_z": -0.5 + n(0.02),
            "acc_x": a_s + n(0.05),
            "acc_y": v_s * r_s + n(0.05),
            "acc_z": 9.81 + n(0.05),
            "steering": 15.0 * out["delta"] + n(0.002),
            "speed": 1.015 * v_s + n(0.03),
        }
    )
    tan_e = np.tan(out["e_psi"])
    for side, off in (("left", LANE_W / 2), ("right", -LANE_W / 2)):
        for k, xl in enumerate(LOOKAHEAD):
            df[f"lane_{side}_y{k}"] = off - out["e_y"] - tan_e * xl + out["kappa"] * xl**2 / 2 + n(0.03 + 0.002 * xl)
    dd = out["d"]
    df["lead_x"] = dd + n(0.2)
    df["lead_y"] = -out["e_y"] - tan_e * dd + out["kappa"] * dd**2 / 2 + n(0.1)
    df["true_speed"] = v_s
    df["true_heading"] = psi_s  # ENU, radians from east (unwrapped)
    df["true_yaw_rate"] = r_s
    df["east_m"], df["north_m"] = out["x"], out["y"]
    return df


def simulate_trip(duration_s: float = 600.0, seed: int = 0) -> pd.DataFrame:
    """One trip: every sensor channel and the true state at 10 ms steps (the draws of ``seed``'s
    generator in a fixed order: road, speed legs, steering noise, lead speed, gyro bias, the drive,
    the sensor noise)."""
    rng = np.random.default_rng(seed)
    T = int(round(duration_s / DT))
    kappa_s = _road(rng, 40.0 * duration_s + 1000)
    legs = _speed_legs(rng, T)
    steer_noise = _ou(rng, T, DT, 1.5, 0.004)
    lead_dev = _ou(rng, T, DT, 8.0, 2.0)
    gyro_bias = _ou(rng, T, DT, 60.0, 0.002)
    out = _drive(rng, kappa_s, legs, steer_noise, lead_dev)
    return _sensors(rng, out, gyro_bias)


TASKS = {
    "speed": (GPS + GYRO, "speed", []),
    "yaw": (["speed", "steering"], "gyro_z", []),
    "lanes": (GPS + GYRO + COMPASS + ["steering"], "lane_left_y3", LANES),
    "lead": (GPS + GYRO + COMPASS + ["steering"], "lead_x", ["lead_x", "lead_y"]),
}


@loader("driving")
def load_driving(
    info,
    task: str = "speed",
    output: str | None = None,
    train_minutes: float = 10.0,
    test_minutes: float = 5.0,
    lag: int = 128,
    lag_step: int = 16,
    stride: int = 10,
    mode: str | None = None,
    seed: int = 0,
    missing: str = "drop",
) -> Table:
    """Train trip (seed 2*seed) and test trip (seed 2*seed+1) as lagged windows; see the module doc."""
    if task not in TASKS:
        raise DataError(f"dataset '{info.name}': option task must be one of {', '.join(TASKS)}; got {task!r}")
    for nm, v in (("train_minutes", train_minutes), ("test_minutes", test_minutes)):
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v <= 0:
            raise DataError(f"dataset '{info.name}': option {nm} must be > 0; got {v!r}")
    target: str | list[str]
    inputs, target, outputs = TASKS[task]
    if output == "all":
        target = list(outputs or [target])
    elif output is not None:
        if output not in (outputs or [target]):
            raise DataError(
                f"dataset '{info.name}': task={task} has outputs {outputs or [target]} (or 'all'); "
                f"got output={output!r}"
            )
        target = output
    past = [c for c in outputs if c not in ([target] if isinstance(target, str) else target)]
    mode = mode or ("autoregression" if task in ("lanes", "lead") else "regression")
    train = simulate_trip(60.0 * train_minutes, seed=2 * seed)
    test = simulate_trip(60.0 * test_minutes, seed=2 * seed + 1)
    return windows_table(
        info.name,
        [(train, False), (test, True)],
        inputs=inputs,
        target=target,
        lag=lag,
        mode=mode,
        past=past,
        lag_step=lag_step,
        stride=stride,
        missing=missing,
        source=f"generator:driving(task={task}, seed={seed})",
    )
