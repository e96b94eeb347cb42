"""KISS-GP refreshes of the GP-LSTM car tasks (paper Table 3; issue 41, item 3), old path against the
structure-aware one, measured in one run.

Setting: ``+experiment=gplstm_driving`` (the paper's car protocol: 2-layer LSTM of 64 units, KISS on a
100 x 100 grid over a 2-D embedding, Algorithm 2 with 5 theta steps per refresh), GP-LSTM, seed 0,
``--task`` speed (default; one output) or lanes (14 outputs), one thread. From the same state, one
kernel refresh of Algorithm 2 (embedding, the refresh check's two NLMLs, 5 theta steps, the
cotangents; ``training.kernel_refresh.KernelRefresh.refresh``) with W K_UU W^T as gpytorch's
``InterpolatedLinearOperator`` (``GridInterpolationKernelInOrder.factored = False``: the path before
issue 41) and as ``models.kiss_operator.FactoredKissOperator`` (the default). Both use the same probe
vectors (seeded per refresh); reported: seconds, the ratio, the same for the GP algebra alone (the refresh
less its two network embeddings, timed separately), and how far the results are apart (the NLML/N, the
hyperparameters after the theta steps, the cotangents).
"""

from __future__ import annotations

import argparse
import copy
import time

import torch


def _prepare(task: str, extra=()):
    from hydra import compose, initialize_config_module

    from gpdlm_cli.prepare import prepare

    overrides = ["+experiment=gplstm_driving", f"dataset.task={task}", "model=gp_lstm", "seed=0", "threads=1"]
    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = compose(config_name="config", overrides=[*overrides, "tracking.enabled=false", *extra])
    return prepare(cfg)


def refresh_once(p, factored: bool, state) -> tuple[float, dict]:
    """Seconds of one refresh from ``state`` (model and theta-optimiser state) and its results."""
    from gpdlm_cli.models.deep_kernel import GridInterpolationKernelInOrder

    stage = next(s for s in p.method.stages if s.name == "delayed")
    refresh = next(h for h in stage.hooks if hasattr(h, "refresh"))
    model = p.method.model
    model.load_state_dict(state["model"])
    refresh.theta_opt.load_state_dict(state["opt"])
    refresh.refreshes, refresh.last, refresh.h_prev, refresh.masks = 0, None, None, None
    if refresh.mask_generator is not None:  # the same dropout masks for both paths
        refresh.mask_generator.set_state(state["masks"])
    GridInterpolationKernelInOrder.factored = factored
    try:
        t0 = time.perf_counter()
        refresh.refresh()
        seconds = time.perf_counter() - t0
    finally:
        GridInterpolationKernelInOrder.factored = True
    theta = torch.cat([q.detach().reshape(-1) for g in ("kernel", "likelihood") for q in model.groups()[g]])
    return seconds, {"value": float(refresh.last), "theta": theta, "cotangents": refresh.surrogate.cotangents.clone()}


def embeddings(p, refresh, state) -> float:
    """Seconds of a refresh's two embeddings of the training windows (under the old and the new dropout
    masks): the part of a refresh the GP's operator does not touch."""
    model = p.method.model
    model.load_state_dict(state["model"])
    gen = refresh.mask_generator
    t0 = time.perf_counter()
    with torch.no_grad():
        masks = model.network.draw_masks(refresh.n, gen) if gen is not None and model.network.stochastic else None
        model.embed(refresh.x, masks=masks)
        model.embed(refresh.x, masks=masks)
    return time.perf_counter() - t0


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--task", default="speed")
    parser.add_argument(
        "--new-only", action="store_true", help="time the structure-aware path alone (lanes: old ~400 s)"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    p = _prepare(args.task)
    n, d = p.data.x_train.shape[0], p.method.model.num_outputs
    print(
        f"car task {args.task}: n_train {n}, outputs {d}, grid 100 x 100, dense below {p.method.model.kiss_dense_below}"
    )
    stage = next(s for s in p.method.stages if s.name == "delayed")
    refresh = next(h for h in stage.hooks if hasattr(h, "refresh"))
    state = {
        "model": copy.deepcopy(p.method.model.state_dict()),
        "opt": copy.deepcopy(refresh.theta_opt.state_dict()),
    }
    state["masks"] = refresh.mask_generator.get_state() if refresh.mask_generator is not None else None
    if args.new_only:
        new_s, _ = refresh_once(p, True, state)
        print(f"  one refresh ({refresh.theta_steps} theta steps), structure-aware: {new_s:7.2f} s")
        return
    old_s, old = refresh_once(p, False, state)
    new_s, new = refresh_once(p, True, state)
    embed_s = embeddings(p, refresh, state)
    print(
        f"  one refresh ({refresh.theta_steps} theta steps): old {old_s:8.2f} s, structure-aware {new_s:7.2f} s, ratio {old_s / new_s:5.1f}x"
    )
    print(
        f"  of which the network's two embeddings (the same in both) {embed_s:.2f} s; the GP algebra: old "
        f"{old_s - embed_s:8.2f} s, structure-aware {new_s - embed_s:7.2f} s, ratio {(old_s - embed_s) / (new_s - embed_s):5.1f}x"
    )
    dv = abs(old["value"] - new["value"])
    dt = float(((old["theta"] - new["theta"]).abs() / old["theta"].abs().clamp_min(1e-12)).max())
    c0, c1 = old["cotangents"].reshape(-1), new["cotangents"].reshape(-1)
    dc = float((c0 - c1).norm() / c0.norm())
    print(
        f"  |NLML/N difference| {dv:.1e}; hyperparameters' largest relative difference {dt:.1e}; cotangents' relative difference {dc:.1e}"
    )


if __name__ == "__main__":
    main()
