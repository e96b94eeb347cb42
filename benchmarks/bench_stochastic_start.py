"""A faster schedule for a stochastic stage? (issue 21, item 1: "for stochastic ones the best schedule you can
show reaches the same objective sooner"). One candidate, measured on the `count` preset's DLM stage (bMC,
K = 10 samples, full batch, Poisson likelihood, doctor_visits, n = 500):

* paper: the paper protocol's Adam from the family's initialisation, the `block_mean` rule, 3,000 at most;
* deterministic start: the same objective with the quadrature estimator (deterministic, so `trainer=fast`
  trains it with L-BFGS to its tests), then the paper protocol's bMC stage from that end state.

Both are scored by the *expected* bMC objective at their end (the mean of R fresh estimates, no gradient),
with its standard error, and by their wall time.

    python benchmarks/bench_stochastic_start.py [--seeds 0 1] [--betas 1.95312 0.01] [--reps 400]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch


def _job(seed, beta, estimator, protocol, extra=()):
    from bench_study import compose

    from gpdlm_cli.prepare import prepare

    return prepare(
        compose(
            [
                "+experiment=count",
                "model=dlm",
                "dataset=doctor_visits",
                "dataset.split.train_size=500",
                f"seed={seed}",
                f"objective.beta={beta}",
                f"estimator={estimator}",
                f"trainer={protocol}",
                "threads=1",
                "trainer.eval_every=0",
                "progress=false",
                *extra,
            ]
        )
    )


def _fit(p):
    from gpdlm_cli.training import run_stages

    t = time.perf_counter()
    f = run_stages(
        p.method.stages,
        p.data.x_train,
        p.data.y_train,
        p.settings,
        generator=torch.Generator().manual_seed(0),
        modules=p.method.modules,
    )
    return f, time.perf_counter() - t


def _expected(p, reps):
    """The expected stochastic objective at the current parameters: mean and SE of ``reps`` fresh estimates."""
    (stage,) = [s for s in p.method.stages if s.solve is None]
    with torch.no_grad():
        v = [float(stage.objective(p.data.x_train, p.data.y_train)) for _ in range(reps)]
    return statistics.fmean(v), statistics.stdev(v) / reps**0.5


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", nargs="*", type=int, default=[0, 1])
    ap.add_argument("--betas", nargs="*", type=float, default=[1.95312, 0.01])
    ap.add_argument("--reps", type=int, default=400)
    a = ap.parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)
    for seed in a.seeds:
        for beta in a.betas:
            paper = _job(seed, beta, "bmc", "paper")
            fp, tp = _fit(paper)
            mp, sp = _expected(paper, a.reps)
            quad = _job(seed, beta, "quadrature", "fast")
            fq, tq = _fit(quad)
            start = _job(seed, beta, "bmc", "paper")
            for mine, theirs in zip(start.method.modules, quad.method.modules):
                mine.load_state_dict(theirs.state_dict())
            fs, ts = _fit(start)
            ms, ss = _expected(start, a.reps)
            print(
                f"seed={seed} beta={beta:<8g} paper: {fp.iterations} it {tp:5.1f} s, E[obj] {mp:.4f} +- {sp:.4f} | "
                f"deterministic start: L-BFGS {fq.iterations} it {tq:5.1f} s + bMC {fs.iterations} it {ts:5.1f} s, "
                f"E[obj] {ms:.4f} +- {ss:.4f} | difference {ms - mp:+.4f}, time x{(tq + ts) / tp:.1f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
