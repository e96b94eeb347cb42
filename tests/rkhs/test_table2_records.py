"""docs/results/rkhs_table2_2026-11-29/study.md's table: per set, mask, method and b the best train NLML over the
learning rates run (Table 2's selection), as printed (three decimals), is what the committed records say; and
SCGD and the paper's MINIMAX end below BSGD at b = 32 on every set and mask, as the study and the README say; and
part 4's SVGP (M = b = 32, scored by its exact NLML) per set and mask, SCGD below it on all 8 sets in the mean; and parts
6 and 7's masks 2-4 of bike, kin40k and pol, and of elevators and protein, which decide the cells 2 masks left
underpowered."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

FOLDER = Path(__file__).resolve().parents[2] / "docs/results/rkhs_table2_2026-11-29"
RECORDS = sorted(FOLDER.glob("runs*.jsonl.gz"))  # part 1 (5 sets), 2 (tamielectric, keggdirected), 3 (keggundirected),
# 4 (SVGP on all 8, MINIMAX on keggundirected), 5 (MINIMAX on keggdirected and tamielectric), 6 (masks 2-4 of bike,
# kin40k, pol), 7 (masks 2-4 of elevators and protein: SCGD and BSGD), 8 (MINIMAX and BSGD b32 on keggundirected's
# masks 2-4), 9 (masks 2-4 of keggdirected: SCGD and BSGD), 10 (keggundirected's other masks 2-4 cells)
# set: mask 0 then 1 of (MINIMAX b32, SCGD b32, BSGD b32, SCGD b128, BSGD b128), as the table prints them
DOC = {
    "bike": ((-0.825, -0.856, -0.065, -0.682, -0.572), (-0.893, -0.882, -0.025, -0.670, -0.554)),
    "elevators": ((-1.373, -1.292, -1.092, -1.327, -1.103), (-1.361, -1.298, -1.097, -1.334, -1.089)),
    "kin40k": ((-1.492, -1.355, -0.631, -1.330, -1.090), (-1.545, -1.353, -0.618, -1.349, -1.108)),
    "pol": ((1.879, 1.899, 2.714, 1.982, 2.376), (1.874, 1.926, 2.756, 1.972, 2.393)),
    "protein": ((0.472, 0.480, 0.661, 0.444, 0.623), (0.464, 0.493, 0.662, 0.428, 0.638)),
    # part 2 (MINIMAX: part 5)
    "tamielectric": ((0.179, 0.179, 0.179, 0.179, 0.179), (0.179, 0.179, 0.179, 0.179, 0.179)),
    "keggdirected": ((-0.785, -0.779, -0.694, -0.805, -0.763), (-0.769, -0.768, -0.684, -0.794, -0.751)),
    # part 3 (MINIMAX: part 4)
    "keggundirected": ((-0.733, -0.736, -0.707, -0.764, -0.747), (-0.741, -0.738, -0.705, -0.767, -0.752)),
}
# part 4: SVGP at b = 32, the best train NLML over its lr grid, masks 0 and 1
SVGP = {
    "bike": (-0.870, -0.857),
    "elevators": (-1.126, -1.111),
    "kin40k": (-0.683, -0.669),
    "pol": (2.016, 1.991),
    "protein": (0.592, 0.600),
    "tamielectric": (0.179, 0.179),
    "keggdirected": (-0.750, -0.739),
    "keggundirected": (-0.728, -0.730),
}
COLUMNS = (("minimax", 32), ("scgd", 32), ("bsgd", 32), ("scgd", 128), ("bsgd", 128))
# part 6: masks 2, 3, 4 of (SCGD b32, SVGP b32, BSGD b32, SCGD b128, BSGD b128), as its table prints them
MASKS_2_4 = {
    "bike": (
        (-0.882, -0.908, -0.059, -0.693, -0.592),
        (-0.799, -0.854, -0.050, -0.693, -0.584),
        (-0.947, -0.849, -0.067, -0.677, -0.594),
    ),
    "kin40k": (
        (-1.362, -0.817, -0.621, -1.330, -1.129),
        (-1.407, -0.666, -0.626, -1.358, -1.106),
        (-1.410, -0.692, -0.601, -1.338, -1.128),
    ),
    "pol": (
        (1.946, 2.020, 2.742, 1.970, 2.357),
        (1.882, 1.983, 2.771, 1.974, 2.365),
        (1.900, 2.039, 2.706, 1.948, 2.355),
    ),
}
COLUMNS_2_4 = (("scgd", 32), ("svgp", 32), ("bsgd", 32), ("scgd", 128), ("bsgd", 128))
# part 7: masks 2, 3, 4 of (SCGD b32, BSGD b32, SCGD b128, BSGD b128), as its table prints them
PART_7 = {
    "elevators": (
        (-1.305, -1.101, -1.348, -1.092),
        (-1.298, -1.102, -1.366, -1.106),
        (-1.303, -1.097, -1.341, -1.093),
    ),
    "protein": (
        (0.476, 0.668, 0.437, 0.629),
        (0.476, 0.661, 0.433, 0.631),
        (0.477, 0.669, 0.439, 0.626),
    ),
}
COLUMNS_7 = (("scgd", 32), ("bsgd", 32), ("scgd", 128), ("bsgd", 128))
# part 8: keggundirected's masks 2, 3, 4 of (MINIMAX b32, BSGD b32)
PART_8 = {"keggundirected": ((-0.737, -0.714), (-0.743, -0.734), (-0.742, -0.716))}
COLUMNS_8 = (("minimax", 32), ("bsgd", 32))
# part 11: masks 2, 3, 4 of SVGP (b = 32) and of the paper's MINIMAX (b = 32), and b = 64 on masks 0, 1 of
# (MINIMAX, SCGD, SVGP, BSGD)
PART_11_SVGP = {
    "elevators": (-1.131, -1.118, -1.125),
    "protein": (0.588, 0.557, 0.557),
    "keggdirected": (-0.740, -0.737, -0.744),
}
PART_11_MINIMAX = {
    "pol": (1.882, 1.867, 1.892),
    "bike": (-0.882, -0.823, -0.931),
    "elevators": (-1.370, -1.353, -1.356),
    "kin40k": (-1.463, -1.440, -1.494),
}
B64 = {
    "bike": ((-0.796, -0.767, -0.801, -0.348), (-0.759, -0.737, -0.767, -0.313)),
    "elevators": ((-1.406, -1.318, -1.150, -1.079), (-1.380, -1.303, -1.117, -1.073)),
    "pol": ((1.888, 1.900, 2.039, 2.535), (1.911, 1.999, 2.010, 2.586)),
}
# part 10: keggundirected's masks 2, 3, 4 per (method, b)
PART_10 = {
    ("scgd", 32): (-0.739, -0.742, -0.734),
    ("scgd", 128): (-0.769, -0.774, -0.764),
    ("bsgd", 128): (-0.753, -0.760, -0.756),
}
# part 9: keggdirected's masks 2, 3, 4 of (SCGD b32, BSGD b32, SCGD b128, BSGD b128)
PART_9 = {
    "keggdirected": (
        (-0.769, -0.688, -0.794, -0.755),
        (-0.760, -0.687, -0.790, -0.750),
        (-0.778, -0.694, -0.799, -0.767),
    ),
}


def test_the_studys_table_is_the_records():
    assert [p.name for p in RECORDS] == [
        "runs-10.jsonl.gz",
        "runs-11.jsonl.gz",
        "runs-2.jsonl.gz",
        "runs-3.jsonl.gz",
        "runs-4.jsonl.gz",
        "runs-5.jsonl.gz",
        "runs-6.jsonl.gz",
        "runs-7.jsonl.gz",
        "runs-8.jsonl.gz",
        "runs-9.jsonl.gz",
        "runs.jsonl.gz",
    ]
    d = pd.concat([pd.read_json(p, lines=True) for p in RECORDS])
    d = d[d.params.notna() & (d.status == "FINISHED")]
    best: dict = {}
    for p, m in zip(d.params, d.metrics):
        key = (p["dataset.name"], int(p["dataset.split.mask"]), p["model.name"], int(p["trainer.batch_size"]))
        best[key] = min(best.get(key, float("inf")), float(m["train_nlml"]))
    table = {
        s: tuple(
            tuple(round(best[(s, mask, *c)], 3) if (s, mask, *c) in best else None for c in COLUMNS) for mask in (0, 1)
        )
        for s in DOC
    }
    assert table == DOC
    assert {s: tuple(round(best[(s, mask, "svgp", 32)], 3) for mask in (0, 1)) for s in SVGP} == SVGP
    masks_2_4 = {s: tuple(tuple(round(best[(s, m, *c)], 3) for c in COLUMNS_2_4) for m in (2, 3, 4)) for s in MASKS_2_4}
    assert masks_2_4 == MASKS_2_4
    assert {s: tuple(tuple(round(best[(s, m, *c)], 3) for c in COLUMNS_7) for m in (2, 3, 4)) for s in PART_7} == PART_7
    assert {s: tuple(tuple(round(best[(s, m, *c)], 3) for c in COLUMNS_8) for m in (2, 3, 4)) for s in PART_8} == PART_8
    assert {s: tuple(tuple(round(best[(s, m, *c)], 3) for c in COLUMNS_7) for m in (2, 3, 4)) for s in PART_9} == PART_9
    assert not any(key[1] > 1 for key in best if key[0] not in {**MASKS_2_4, **PART_7, **PART_8, **PART_9})
    # part 10: keggundirected's masks 2-4 of (SCGD b32, SCGD b128, BSGD b128); with part 8, all four cells at 5 masks
    assert {c: tuple(round(best[("keggundirected", m, *c)], 3) for m in (2, 3, 4)) for c in PART_10} == PART_10
    assert {key[2:] for key in best if key[0] == "keggundirected" and key[1] > 1} == {*COLUMNS_7, ("minimax", 32)}
    u = [{c: best[("keggundirected", m, *c)] for c in COLUMNS_7} for m in range(5)]
    assert all(r["scgd", 32] < r["bsgd", 32] and 0 < r["scgd", 32] - r["scgd", 128] < 0.05 for r in u)
    assert all(r["bsgd", 128] < r["bsgd", 32] for r in u)
    assert {key[2:] for key in best if key[0] in PART_9 and key[1] > 1} == {*COLUMNS_7, ("svgp", 32)}  # SVGP: part 11
    # part 9: on every keggdirected mask SCGD below BSGD at b = 32, SCGD at b = 32 within 0.05 of b = 128 (and not
    # better), BSGD better at b = 128
    k = [{c: best[("keggdirected", m, *c)] for c in COLUMNS_7} for m in range(5)]
    assert all(r["scgd", 32] < r["bsgd", 32] and 0 < r["scgd", 32] - r["scgd", 128] < 0.05 for r in k)
    assert all(r["bsgd", 128] < r["bsgd", 32] for r in k)
    # part 8: MINIMAX below BSGD at b = 32 on every keggundirected mask (open at 2 masks: p = 0.053)
    assert all(best[("keggundirected", m, "minimax", 32)] < best[("keggundirected", m, "bsgd", 32)] for m in range(5))
    # part 11: SVGP's and MINIMAX's masks 2-4 where run, and nowhere else on the sets of parts 6-7; SCGD below SVGP and
    # MINIMAX below BSGD at b = 32 on every mask of those sets; b = 64 only on masks 0-1 of pol, bike, elevators
    r3 = lambda s, m, c: round(best[(s, m, *c)], 3)  # noqa: E731
    assert {s: tuple(r3(s, m, ("svgp", 32)) for m in (2, 3, 4)) for s in PART_11_SVGP} == PART_11_SVGP
    assert {s: tuple(r3(s, m, ("minimax", 32)) for m in (2, 3, 4)) for s in PART_11_MINIMAX} == PART_11_MINIMAX
    assert not any(key[1] > 1 and key[2] == "svgp" for key in best if key[0] in PART_7 and key[0] not in PART_11_SVGP)
    assert not any(key[1] > 1 and key[2] == "minimax" for key in best if key[0] == "protein")
    for s in PART_11_SVGP:
        assert all(best[(s, m, "scgd", 32)] < best[(s, m, "svgp", 32)] for m in range(5)), s
    for s in PART_11_MINIMAX:
        assert all(best[(s, m, "minimax", 32)] < best[(s, m, "bsgd", 32)] for m in range(5)), s
    b64 = ("minimax", "scgd", "svgp", "bsgd")
    assert {s: tuple(tuple(r3(s, m, (c, 64)) for c in b64) for m in (0, 1)) for s in B64} == B64
    assert {key[0] for key in best if key[3] == 64} == set(B64) and {key[1] for key in best if key[3] == 64} == {0, 1}
    # part 7: SCGD at b = 32 trails b = 128 on every mask of elevators and protein (by 0.035-0.068: no-degradation
    # fails on both), on elevators' mask 3 beyond the 0.05 margin; BSGD better at b = 128 on every protein mask
    for s in PART_7:
        gaps = [best[(s, m, "scgd", 32)] - best[(s, m, "scgd", 128)] for m in range(5)]
        assert all(0.03 < g < 0.07 for g in gaps) and 0.04 < sum(gaps) / 5 < 0.05, (s, gaps)
    assert best[("elevators", 3, "scgd", 32)] - best[("elevators", 3, "scgd", 128)] > 0.05
    assert all(best[("protein", m, "bsgd", 128)] < best[("protein", m, "bsgd", 32)] for m in range(5))
    for s in ("kin40k", "pol"):  # part 6: SCGD no worse at b = 32 than at 128 on every mask; on pol below SVGP on all 5
        assert all(best[(s, m, "scgd", 32)] < best[(s, m, "scgd", 128)] for m in range(5)), s
    assert all(best[("pol", m, "scgd", 32)] < best[("pol", m, "svgp", 32)] for m in range(5))
    bike = [best[("bike", m, "scgd", 32)] - best[("bike", m, "svgp", 32)] for m in range(5)]
    assert sum(d < 0 for d in bike) == 2 and abs(sum(bike) / 5) < 0.01  # no difference on bike: 2 of 5, mean -0.005
    for s in SVGP:  # T2-scgd-beats-svgp-b32: SCGD's mean below SVGP's on every set (tamielectric by 1e-4)
        assert sum(best[(s, mask, "scgd", 32)] - best[(s, mask, "svgp", 32)] for mask in (0, 1)) < 0, s
    for s, masks in DOC.items():
        for minimax, scgd, bsgd, *_ in masks:
            if s == "tamielectric":  # noise-bound: every method ends at the same NLML
                assert round(scgd, 3) == round(bsgd, 3), s
                continue
            assert (minimax is None or minimax < bsgd) and scgd < bsgd, s
    # keggundirected decides both b = 128 claims (5 of 8 sets each): SCGD at b = 32 within the 0.05 margin of b = 128,
    # BSGD better at b = 128, on both masks
    for _, scgd32, bsgd32, scgd128, bsgd128 in DOC["keggundirected"]:
        assert 0 < scgd32 - scgd128 < 0.05 and bsgd128 < bsgd32
    # the paper's settings, every run: MINIMAX mu = 1 (inexact), SCGD b_t = 0.9 constant
    assert {(p["model.mu"], p["model.exact_penalty"]) for p in d.params if p["model.name"] == "minimax"} == {
        ("1.0", "False")
    }
    assert {(p["model.b0"], p["model.b_decay"]) for p in d.params if p["model.name"] == "scgd"} == {("0.9", "0.0")}
    assert {int(p["trainer.max_epochs"]) for p in d.params} == {100}
