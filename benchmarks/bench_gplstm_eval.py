"""GP-LSTM evaluation cost at the paper's Table 2 protocol (issue 41, item 1), as ratios measured in one run.

Setting: ``+experiment=gplstm_sysid`` on the real Actuator in free simulation, GP-LSTM with 256 units
(App. E Table 4), Algorithm 2, seed 0, one thread.

1. **One evaluation** (validation and test, every metric): the path before issue 41 (``simulate`` then
   ``rollouts``, both through ``marginals_all``: predictive variances at every step) against the one
   pass (``free_simulation``: rollouts from every start whose trajectory 0 is the simulation, means only
   in the loop, the simulation's variances in one batch), and a training evaluation (one-step metrics
   only: what the selection by ``val_rmse`` needs).
2. **Runs** of ``--epochs`` epochs (default 10) evaluated every 5 epochs, with every evaluation complete
   (``+model.simulate_in_training=true``: the schedule before issue 41) and with the default schedule
   (training evaluations one-step, the final one complete): wall seconds, training seconds (the trainer's
   own, evaluation excluded) and the share of evaluation; then the projection to the paper's 100 epochs
   (20 evaluations) from the measured epoch and evaluation costs.
"""

from __future__ import annotations

import argparse
import tempfile
import time

import torch

OVERRIDES = [
    "+experiment=gplstm_sysid",
    "dataset=actuator",
    "dataset.mode=free_simulation",
    "model=gp_lstm",
    "seed=0",
    "threads=1",
    "progress=false",
    "tracking.enabled=false",
]


def _compose(extra=()):
    from hydra import compose, initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        return compose(config_name="config", overrides=OVERRIDES + list(extra))


def _old_evaluate(ev, xe, ye, prefix, y_std):
    """The evaluation before issue 41: simulate and rollouts separately, variances at every step."""
    from gpdlm_cli.metrics.simulation import rollouts, scored, simulate, simulation_metrics

    ev.model.condition(ev.x, ev.y)
    mu, var = ev.model.marginals_all(xe)
    out = scored(mu, var, ye, ev.likelihoods, y_std, prefix)
    smu, svar = simulate(ev.model.marginals_all, xe, ev.feedback)
    reach = min(max(ev.horizons, default=0), xe.shape[0])
    ahead = rollouts(ev.model.marginals_all, xe, ev.feedback, reach) if reach else None
    out.update(simulation_metrics(smu, svar, ye, ev.likelihoods, y_std, prefix, ev.horizons, ahead))
    return out


def one_evaluation() -> dict[str, float]:
    from gpdlm_cli.prepare import prepare

    p = prepare(_compose())
    d, y_std = p.data, p.splits.y_std
    ev = p.method.evaluate.__self__  # the family's SequenceEvaluation
    splits = ((d.x_val, d.y_val, "val_"), (d.x_test, d.y_test, "test_"))
    print(f"n_train {d.x_train.shape[0]}, n_val {d.x_val.shape[0]}, n_test {d.x_test.shape[0]}, horizons {ev.horizons}")
    out = {}
    t0 = time.perf_counter()
    old = {k: v for xe, ye, pre in splits for k, v in _old_evaluate(ev, xe, ye, pre, y_std).items()}
    out["old"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    new = {k: v for xe, ye, pre in splits for k, v in ev.evaluate(xe, ye, pre, y_std).items()}
    out["one pass"] = time.perf_counter() - t0
    ev.training_started()
    t0 = time.perf_counter()
    for xe, ye, pre in splits:
        ev.evaluate(xe, ye, pre, y_std)
    out["training"] = time.perf_counter() - t0
    ev.training_ended()
    worst = max(abs(old[k] - new[k]) / max(abs(old[k]), 1e-12) for k in old)
    for k, v in out.items():
        print(f"  {k:<9} {v:8.2f} s  ({v / out['old']:.3f} x old)")
    print(f"  largest relative difference of a metric, one pass vs old: {worst:.1e} (float32 network, batched rows)")
    return out


def run(epochs: int, every_evaluation_complete: bool) -> dict[str, float]:
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking.tracker import NullTracker

    extra = [f"trainer.max_epochs={epochs}", "trainer.eval_every_epochs=5"]
    if every_evaluation_complete:
        extra.append("+model.simulate_in_training=true")
    cfg = _compose(extra)
    with tempfile.TemporaryDirectory() as tmp:
        t0 = time.perf_counter()
        m = run_train(cfg, tmp, tracker=NullTracker())
        wall = time.perf_counter() - t0
    return {"wall": wall, "train": m["train_seconds"], "test_sim_rmse": m["test_sim_rmse"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--skip-runs", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    print("1. one evaluation (validation + test, every metric), Table 2 Actuator free simulation, GP-LSTM 256 units")
    ev = one_evaluation()
    if args.skip_runs:
        return
    print(f"2. runs of {args.epochs} epochs, evaluated every 5 epochs")
    rows = {}
    for label, complete in (("every evaluation complete (before)", True), ("default schedule (after)", False)):
        r = run(args.epochs, complete)
        rows[label] = r
        share = 1 - r["train"] / r["wall"]
        print(
            f"  {label:<36} wall {r['wall']:7.1f} s  training {r['train']:7.1f} s  evaluation and set-up {share:5.1%}  "
            f"test_sim_rmse {r['test_sim_rmse']:.4f}",
            flush=True,
        )
    epoch_s = min(r["train"] for r in rows.values()) / args.epochs
    for label, per_eval, final in (
        ("before (old path, every evaluation complete)", ev["old"], ev["old"]),
        ("after (training evaluations one-step, final one pass)", ev["training"], ev["one pass"]),
    ):
        total_eval = 20 * per_eval + final  # 19 in training + the loop's last + the run's final
        total = 100 * epoch_s + total_eval
        print(f"  projection to 100 epochs, {label}: {total / 60:6.1f} min, evaluation {total_eval / total:5.1%}")


if __name__ == "__main__":
    main()
