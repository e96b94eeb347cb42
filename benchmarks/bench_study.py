"""Whole studies: the paper protocol against the fast path, projected and measured (issue 21).

    python -m benchmarks study                     # projection for every DLM study preset (pol by default)
    python benchmarks/bench_study.py --project regression_logloss_pol --sizes 500 2000
    git worktree add /tmp/before c51649a   # the paper protocol as gpdlm ran it at another commit, same run:
    python benchmarks/bench_study.py --project regression_logloss_pol --betas 3 --paper-share dlm=0.73 svgp=0.58 --paper-code /tmp/before
    python benchmarks/bench_study.py ... --paper-code /tmp/before --two-workers 300   # + the paper side on the 2 cores, measured
    python benchmarks/bench_study.py --equivalence --sizes 500 --seeds 0 1 2 --betas 4 --models dlm svgp
    python benchmarks/bench_study.py --equivalence --preset classification --sizes 500 --seeds 0 1 --betas 3
    python benchmarks/bench_study.py --equivalence --preset count --set dataset=doctor_visits --models svgp
    python benchmarks/bench_study.py --from-store sqlite:////work/studies/mlflow.db   # pair real runs of both protocols
    python benchmarks/bench_study.py --paper rkhs --chunk docs/results/rkhs_table2_2026-11-29/runs.jsonl.gz   # projected vs run
    python benchmarks/bench_study.py --from-store URI --fast-experiment protocol_equivalence_pol  # both in one experiment

* **Projection.** The study's jobs are those of `gpdlm sweep beta` for every (model, training size, seed)
  of the preset (the paper's grid n, n/2, ..., 0.01). For each (model, size) shape the paper protocol's
  per-iteration time is measured over 30 iterations and multiplied by its budget (`trainer.max_iters`),
  scaled by the share of it the real paper-protocol runs of a store used (`--paper-share-store`: the
  window rule ends SVGP early at large beta); the fast protocol is run to its own end (first-order
  start, L-BFGS to its tests, `fast_max_iters` at most) on `--betas` betas spread over the grid, cold
  (`--warm`: along the path), so its wall time is measured, not assumed. The projection is per job x
  jobs on one core, sequential. A stage `sweep.share_stages` trains once per (size, seed) (the fixed
  variants' SVGP stage) is timed on its own; the *fast protocol* column counts it in every job, the
  *fast path* column (the fast protocol with shared stages) once per beta grid.
* **Equivalence.** Real runs of the paper protocol and the fast protocol (cold, as `gpdlm train
  trainer=fast` runs a job) on the same jobs of any preset (`--preset`, its models by default; `--betas
  0`: the preset's own beta): the final per-datum objective of each (fast <= paper + 1e-3 is the
  target; for the fixed variants also each stage's, since the second stage's objective depends on where
  the first ended), and per (model, size) the beta that validation selects and its test NLL, mean over seeds.

* **Other papers' studies (issue 41)**, `--paper rkhs|gplstm|svbssgp`: each paper's full protocol projected
  on this machine from timed samples. `rkhs` (Tables 2/4: 8 sets x 5 masks x {SCGD, MINIMAX, BSGD, SVGP} x
  b 32/64/128 x 3 learning rates x 100 epochs = 1,440 runs): CPU ms per step of every (method, b) on the
  paper's network and linear kernel, the reference path (before issue 41) and the fast path timed in the same
  rounds (``bench_rkhs_step``), times the study's steps (100 floor(0.9 N / b) per run), plus 100 full-data
  evaluations per run (one timed at n = 4096, scaled linearly in n: O(n d^2)) and a start-up per run;
  core-hours, and hours on 2 cores (jobs spread over 2 workers), and with ``--batching-factor`` (the per-member
  cost of batched configurations, ``bench_batched``) applied to the step hours. ``--batched``: the
  per-member time of SCGD, MINIMAX, BSGD and SVGP in batches of 15 (``sweep.batched=true``: a shape's members are its
  5 masks x 3 learning rates) timed in the same rounds, and the study projected with them. `gplstm` (Table 2)
  and `svbssgp` (Table 1): every configuration of ``--sample`` (default: every configuration, seed 0) is run
  three times through gpdlm's own ``run_train`` (1 epoch; 2 epochs; 2 epochs evaluated after the first too; CPU
  seconds), which separates one epoch, one evaluation and the fixed cost of a run; the preset's epochs and
  evaluation schedule give each run's projection, the mean over the sample x configurations x seeds the study.
  ``--paper rkhs --chunk FILE``: the same per-run formula for the runs of a chunk actually run (run records of
  ``gpdlm export``), timed now, against their measured start-to-end times, per (method, b) and in all.

Both print a table; `--csv FILE` also writes the rows, so a long measurement can run in chunks
(`--sizes`, `--seeds`, `--betas`, `--models` select one) and be gathered afterwards.
"""

from __future__ import annotations

import argparse
import csv
import statistics
import sys
import time

import torch


def compose(overrides):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        return hydra_compose(config_name="config", overrides=list(overrides))


def preset_axes(preset: str) -> dict[str, list[str]]:
    """The preset's sweep axes (hydra.sweeper.params) as lists of values."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module

    with initialize_config_module(config_module="gpdlm_cli.conf", version_base="1.3"):
        cfg = hydra_compose(config_name="config", overrides=[f"+experiment={preset}"], return_hydra_config=True)
    return {
        str(k): [v.strip() for v in str(val).split(",")] for k, val in (cfg.hydra.sweeper.get("params") or {}).items()
    }


def train_once(overrides, *, protocol: str, warm=None, max_iters=None, share_dir=None):
    """(final per-datum objective, iterations, train seconds, metrics) of one job, in this process.
    ``share_dir``: the stage cache of ``sweep.share_stages`` (a stage restored from it costs no time);
    None: every stage is trained."""
    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking import NullTracker

    share = ["sweep.share_stages=true", f"sweep.cache_dir={share_dir}"] if share_dir else ["sweep.share_stages=false"]
    ov = list(overrides) + [
        f"trainer={protocol}",
        "progress=false",
        "tracking.enabled=false",
        "threads=1",
        "trainer.eval_every=0",
        *share,
    ]
    if max_iters is not None:
        ov.append(f"trainer.max_iters={max_iters}")
    if warm is not None:
        ov.append("sweep.warm_start=true")
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        m = run_train(compose(ov), d, tracker=NullTracker())
    return m["final_loss"], m["iterations"], m["train_seconds"], m


def paper_iteration_share(uri: str | None, experiment: str = "protocol_equivalence_pol") -> dict[str, float]:
    """Per model name, the mean iterations of the paper-protocol runs in ``experiment`` over their cap
    (the window rule ends some jobs early: SVGP at large beta); {} without a store."""
    if not uri:
        return {}
    from gpdlm_cli.analysis import store

    client, uri = store.open_store(uri)
    share: dict[str, list[float]] = {}
    for r in store.load_runs(client, store.get_experiment(client, experiment, uri), notes=[]):
        if r.tags.get("gpdlm.protocol") == "paper" and "iterations" in r.metrics:
            share.setdefault(str(r.value("model.name")), []).append(r.metrics["iterations"] / 5000)
    return {k: statistics.fmean(v) for k, v in share.items()}


def _iteration_timer(code_dir: str, overrides, iterations: int, protocol: str = "paper", threads: int = 1):
    """A fresh process (``subprocess.Popen``) that trains the job ``overrides`` for ``iterations`` with the
    gpdlm code of ``code_dir`` on ``threads`` torch threads and prints its seconds per iteration."""
    import os
    import subprocess

    # one thread, as in this process (main): train_once calls run_train, not the Hydra app that sets
    # `threads`, so a fresh process would otherwise train with torch's default (every core)
    code = (
        f"import sys, json, torch; torch.set_num_threads({threads}); sys.path.insert(0, {code_dir!r}); "
        f"from benchmarks.bench_study import train_once; "
        f"_, it, secs, _ = train_once({list(overrides)!r}, protocol={protocol!r}, max_iters={iterations}); "
        f"print(json.dumps(secs / it))"
    )
    env = {**os.environ, "PYTHONPATH": code_dir}
    return subprocess.Popen(
        [sys.executable, "-c", code], cwd=code_dir, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _seconds_per_iteration(proc) -> float:
    import json

    out, err = proc.communicate()
    if proc.returncode:
        raise RuntimeError(f"timing subprocess failed: {err.strip().splitlines()[-1:]}")
    return float(json.loads(out.strip().splitlines()[-1]))


def paper_seconds_per_iteration_at(code_dir: str, overrides, iterations: int = 30, threads: int = 1) -> float:
    """Seconds per iteration of the paper protocol on the job ``overrides`` (``iterations`` of them) with
    the gpdlm code of another checkout (``git worktree add DIR COMMIT``), in a fresh process: how the
    same job ran before a change, measured in the same run as the current code."""
    return _seconds_per_iteration(_iteration_timer(code_dir, overrides, iterations, threads=threads))


def two_worker_timings(code_dir: str, overrides, iterations: int = 300, protocol: str = "paper") -> dict[str, float]:
    """Seconds per iteration of the job ``overrides`` trained for ``iterations`` in fresh processes, the
    two ways a sweep can use these 2 cores: ``one_thread`` (one process, one torch thread; the mean of a
    run before and one after the pair), ``two_workers`` (two such processes at once, what two joblib
    workers do; their mean) and ``two_threads`` (one process, two torch threads, what a sequential sweep
    with ``threads=auto`` does). A sweep of such jobs takes, on the 2 cores, its job count x budget x
    ``two_workers`` / 2 with two workers and x ``two_threads`` run one after another. The pair starts
    together and trains for seconds, so their start-up difference (imports) does not matter."""

    def one(threads=1):
        return _seconds_per_iteration(_iteration_timer(code_dir, overrides, iterations, protocol, threads))

    first = one()
    pair = [_iteration_timer(code_dir, overrides, iterations, protocol) for _ in range(2)]
    two = statistics.fmean(_seconds_per_iteration(p) for p in pair)
    again = one()
    return {"one_thread": (first + again) / 2, "two_workers": two, "two_threads": one(threads=2)}


def lbfgs_stages(overrides) -> list[bool]:
    """Per iterative stage of the job, whether ``trainer=fast`` trains it with L-BFGS."""
    from gpdlm_cli.prepare import prepare
    from gpdlm_cli.training import stage_settings

    p = prepare(compose(list(overrides) + ["trainer=fast", "threads=1"]))
    return [
        stage_settings(p.settings, st, p.splits.n_train).optimizer == "lbfgs"
        for st in p.method.stages
        if st.solve is None
    ]


def shareable_stages(overrides) -> bool:
    """Whether the job has a stage that ``sweep.share_stages`` trains once for every beta (the fixed
    variants' SVGP stage)."""
    from gpdlm_cli.prepare import prepare

    p = prepare(compose(list(overrides) + ["trainer=fast", "threads=1"]))
    return any(getattr(st, "shareable", False) for st in p.method.stages)


def project(
    preset: str,
    sizes,
    seeds,
    sample_betas: int,
    share: dict[str, float] | None = None,
    warm: bool = False,
    extra=(),
    models=None,
    paper_code: str | None = None,
    two_workers: int = 0,
) -> list[dict]:
    """Projected wall time of the preset's whole beta-sweep grid on one core, both protocols.

    Per (model, size): the paper protocol's ms per iteration (30 iterations of one job) times its
    budget ``trainer.max_iters`` -- times the share of the budget its real runs used (``share``, per
    model name, from a store; 1 without) --, and the fast protocol run to its own end on
    ``sample_betas`` betas spread over the grid (cold starts; ``warm``: along the path instead), their
    mean. A stage that ``sweep.share_stages`` trains once per (size, seed) for the whole beta grid (the
    fixed variants' SVGP stage) is timed on its own -- the first sampled job once with an empty stage
    cache and once restoring the stage -- and every sampled job restores it; the fast protocol alone
    (``fast_s_per_job``) counts the stage in every job, the fast path (``fast_path_s_per_job``: the fast
    protocol with shared stages, what the issue measures against today's protocol) once per grid. The
    paper side counts it in every job (today's protocol trains it for every beta). ``paper_code``: a
    checkout of earlier gpdlm code whose paper protocol is timed the same way in a subprocess
    (``paper_ref_*``: the protocol as it ran before the hot-path work measured here). ``two_workers``
    (iterations; 0 = off): how that checkout's paper-protocol job scales to two workers on these two
    cores (``two_worker_timings``, its mid-grid job of each (model, size)), so the paper side's wall time
    on two workers is measured per shape instead of assumed (``paper_ref_2w_total_h``)."""
    from gpdlm_cli.commands.sweep import beta_grid
    from gpdlm_cli.training.reuse import clear_warm_starts

    share = share or {}
    axes = preset_axes(preset)
    models = models or axes.get("model", ["dlm"])
    sizes = sizes or [int(s) for s in axes.get("dataset.split.train_size", ["2000"])]
    n_seeds = len(seeds or axes.get("seed", ["0"]))
    base = [f"+experiment={preset}", *extra]
    cfg = compose(base)
    paper_cap = int(cfg.trainer.max_iters)
    rows = []
    for n in sizes:
        grid = beta_grid(n, 0.01, 2.0)
        k = min(sample_betas, len(grid))
        pick = [grid[round(i * (len(grid) - 1) / max(1, k - 1))] for i in range(k)]
        for model in models:
            ov = base + [f"model={model}", f"dataset.split.train_size={n}", "seed=0"]
            mname = str(compose(ov).model.name)
            kinds = lbfgs_stages(ov)
            clear_warm_starts()
            stage_s = 0.0
            if shareable_stages(ov):
                import tempfile

                with tempfile.TemporaryDirectory() as cache:
                    first = train_once(ov + [f"objective.beta={pick[0]:g}"], protocol="fast", share_dir=cache)
                    clear_warm_starts()
                    fast = [
                        train_once(ov + [f"objective.beta={b:g}"], protocol="fast", warm=warm or None, share_dir=cache)
                        for b in pick
                    ]
                stage_s = max(0.0, first[2] - fast[0][2])  # the shared stage's own training time
            else:
                fast = [train_once(ov + [f"objective.beta={b:g}"], protocol="fast", warm=warm or None) for b in pick]
            path_job = statistics.fmean(f[2] for f in fast) + stage_s / len(grid)
            fast_job = statistics.fmean(f[2] for f in fast) + stage_s
            if not any(kinds):  # every stage stochastic: both protocols train it the same way
                paper_job, note = fast_job, "  (no L-BFGS stage: the same protocol)"
                path_job, ref_job, two = fast_job, None, None
            else:
                mid = ov + [f"objective.beta={grid[len(grid) // 2]:g}"]
                _, it, secs, _ = train_once(mid, protocol="paper", max_iters=30)
                paper_job = secs / it * paper_cap * share.get(mname, 1.0)
                two = two_worker_timings(paper_code, mid, two_workers) if paper_code and two_workers else None
                ref_job = (
                    (two["one_thread"] if two else paper_seconds_per_iteration_at(paper_code, mid))
                    * paper_cap
                    * share.get(mname, 1.0)
                    if paper_code
                    else None
                )
                note = (
                    ""
                    if all(kinds)
                    else "  (a stochastic stage too: the paper side assumes its full budget, an upper bound)"
                )

            jobs = len(grid) * n_seeds
            ref_or_paper = ref_job if ref_job is not None else paper_job
            rows.append(
                {
                    "preset": preset,
                    "model": model,
                    "n": n,
                    "jobs": jobs,
                    "paper_s_per_job": paper_job,
                    "paper_total_h": jobs * paper_job / 3600,
                    "fast_s_per_job": fast_job,
                    "fast_iters": statistics.fmean(f[1] for f in fast),
                    "fast_total_h": jobs * fast_job / 3600,
                    "speedup": paper_job / max(fast_job, 1e-9),
                    "shared_stage_s": stage_s,
                    "fast_path_s_per_job": path_job,
                    "fast_path_total_h": jobs * path_job / 3600,
                    "path_speedup": paper_job / max(path_job, 1e-9),
                    "paper_ref_s_per_job": ref_or_paper,
                    "paper_ref_total_h": jobs * ref_or_paper / 3600,
                    **(
                        {
                            "paper_ref_2w_total_h": jobs
                            * two["two_workers"]
                            * paper_cap
                            * share.get(mname, 1.0)
                            / 7200,
                            "paper_ref_2t_total_h": jobs
                            * two["two_threads"]
                            * paper_cap
                            * share.get(mname, 1.0)
                            / 3600,
                            "paper_ref_two_worker_factor": two["two_workers"] / two["one_thread"],
                            "paper_ref_two_thread_factor": two["two_threads"] / two["one_thread"],
                        }
                        if two
                        else {}
                    ),
                }
            )
            r = rows[-1]
            shared = (
                (
                    f"   fast path (stage of {stage_s:.1f} s shared by {len(grid)} betas) {path_job:6.1f} s/job "
                    f"{r['fast_path_total_h']:6.2f} h   x{r['path_speedup']:.1f}"
                )
                if stage_s
                else ""
            )
            ref = f"paper at {paper_code} {ref_job:7.1f} s/job   " if ref_job is not None else ""
            if two:
                ref += (
                    f"(2 cores: two workers {r['paper_ref_2w_total_h']:.2f} h, x{r['paper_ref_two_worker_factor']:.2f} per "
                    f"iteration; two threads {r['paper_ref_2t_total_h']:.2f} h, x{r['paper_ref_two_thread_factor']:.2f})   "
                )
            print(
                f"{preset:<26} {model:<12} n={n:<5} jobs={jobs:<4} {ref}paper {paper_job:7.1f} s/job {r['paper_total_h']:7.2f} h   "
                f"fast {fast_job:6.1f} s/job ({r['fast_iters']:.0f} it) {r['fast_total_h']:6.2f} h   x{r['speedup']:.1f}{shared}{note}",
                flush=True,
            )
    total_p = sum(r["paper_total_h"] for r in rows)
    total_f = sum(r["fast_total_h"] for r in rows)
    total_s = sum(r["fast_path_total_h"] for r in rows)
    if paper_code:
        total_r = sum(r["paper_ref_total_h"] for r in rows)
        print(
            f"{preset}: paper protocol with the code at {paper_code} {total_r:.1f} h: x{total_r / max(total_f, 1e-9):.1f} "
            f"against the fast protocol, x{total_r / max(total_s, 1e-9):.1f} against the fast path"
        )
        if two_workers:
            total_2w = sum(r.get("paper_ref_2w_total_h", r["paper_ref_total_h"] / 2) for r in rows)
            total_2t = sum(r.get("paper_ref_2t_total_h", r["paper_ref_total_h"]) for r in rows)
            print(
                f"{preset}: paper protocol with the code at {paper_code} on the 2 cores, measured per shape: two "
                f"one-thread workers {total_2w:.2f} h (x{total_r / max(total_2w, 1e-9):.2f} the one-core time), one "
                f"two-thread job at a time {total_2t:.2f} h (x{total_r / max(total_2t, 1e-9):.2f})"
            )
    print(
        f"{preset}: {sum(r['jobs'] for r in rows)} jobs, paper protocol {total_p:.1f} h, fast protocol {total_f:.2f} h "
        f"(x{total_p / max(total_f, 1e-9):.1f}), fast path with shared stages {total_s:.2f} h (x{total_p / max(total_s, 1e-9):.1f}) "
        f"on 1 core; on 2 cores (2 joblib workers) about half of each"
    )
    return rows


def equivalence(preset: str, sizes, seeds, betas: int, models=None, warm: bool = False, extra=()) -> list[dict]:
    """Both protocols on the same jobs of ``preset``, in this process: per job the final per-datum
    objective of each (the target: fast <= paper + 1e-3), their iterations and seconds; per (model, size)
    the beta validation selects under each protocol and its test NLL, mean over seeds.

    ``models`` default to the preset's; ``betas`` betas spread over the paper's grid for each size (0: the
    preset's own ``objective.beta``, for the presets without a beta sweep: SGPR, FITC, SSGP, ...). Fast
    jobs start cold, as a plain ``gpdlm train trainer=fast`` does (``warm``: along the path of picked betas,
    upwards from the smallest, as ``sweep.warm_start=true`` runs it)."""
    from gpdlm_cli.commands.sweep import beta_grid
    from gpdlm_cli.training.reuse import clear_warm_starts

    rows = []
    base = [f"+experiment={preset}", *extra]
    axes = preset_axes(preset)
    models = models or axes.get("model") or [None]
    for n in sizes:
        if betas:
            grid = beta_grid(n, 0.01, 2.0)
            pick = (
                [grid[round(i * (len(grid) - 1) / max(1, betas - 1))] for i in range(betas)]
                if betas < len(grid)
                else grid
            )
            pick = sorted(pick) if warm else pick
        else:
            pick = [None]
        for model in models:
            for seed in seeds:
                clear_warm_starts()
                for b in pick:
                    ov = (
                        base + ([f"model={model}"] if model else []) + [f"dataset.split.train_size={n}", f"seed={seed}"]
                    )
                    ov += [f"objective.beta={b:g}"] if b is not None else []
                    lp, ip, sp, mp = train_once(ov, protocol="paper")
                    lf, i_f, sf, mf = train_once(ov, protocol="fast", warm=True if warm else None)
                    beta = float(b) if b is not None else float(compose(ov).objective.beta)
                    rows.append(
                        {
                            "preset": preset,
                            "model": model or str(compose(ov).model.name),
                            "n": n,
                            "seed": seed,
                            "beta": beta,
                            "paper_loss": lp,
                            "fast_loss": lf,
                            "paper_iters": ip,
                            "fast_iters": i_f,
                            "paper_s": sp,
                            "fast_s": sf,
                            "paper_val_nll": mp.get("val_nll", float("nan")),
                            "fast_val_nll": mf.get("val_nll", float("nan")),
                            "paper_test_nll": mp.get("test_nll", float("nan")),
                            "fast_test_nll": mf.get("test_nll", float("nan")),
                        }
                    )
                    r = rows[-1]
                    stages = sorted(k for k in mp if k.startswith("final_loss_"))  # multi-stage (fixed variants)
                    r["stages"] = ";".join(f"{k[11:]}={mp[k]:.6g}/{mf.get(k, float('nan')):.6g}" for k in stages)
                    ok = "ok" if lf <= lp + 1e-3 else "HIGHER"
                    per_stage = f"  per stage paper/fast: {r['stages']}" if stages else ""
                    print(
                        f"{preset:<24} {r['model']:<12} n={n:<5} seed={seed} beta={beta:<9.4g} paper {lp:9.5f} ({ip} it, {sp:6.1f} s)  "
                        f"fast {lf:9.5f} ({i_f} it, {sf:6.1f} s)  {ok}{per_stage}",
                        flush=True,
                    )
    # selection: per (model, n, seed) the beta with the lowest val_nll, its test NLL, mean over seeds
    for model in sorted({r["model"] for r in rows}):
        for n in sizes:
            for proto in ("paper", "fast"):
                picks = []
                for seed in seeds:
                    rs = [r for r in rows if r["model"] == model and r["n"] == n and r["seed"] == seed]
                    if len(rs) > 1:
                        best = min(rs, key=lambda r: r[f"{proto}_val_nll"])
                        picks.append((best["beta"], best[f"{proto}_test_nll"]))
                if picks:
                    t = [p[1] for p in picks]
                    se = statistics.stdev(t) / len(t) ** 0.5 if len(t) > 1 else float("nan")
                    print(
                        f"select {model:<10} n={n:<5} {proto:<5}: betas {[p[0] for p in picks]}, test NLL "
                        f"{statistics.mean(t):.4f} +- {se:.4f}"
                    )
    higher = [r for r in rows if r["fast_loss"] > r["paper_loss"] + 1e-3]
    if rows:
        sp, sf = sum(r["paper_s"] for r in rows), sum(r["fast_s"] for r in rows)
        print(
            f"{preset}: fast <= paper + 1e-3 per datum in {len(rows) - len(higher)} of {len(rows)} jobs; "
            f"seconds paper {sp:.0f}, fast {sf:.0f} (x{sp / max(sf, 1e-9):.1f})"
        )
    return rows


def from_store(uri: str, fast_experiment: str, paper_experiment: str) -> list[dict]:
    """Equivalence and cost from real runs already in a store: every job of ``paper_experiment`` (the
    paper protocol) is paired with the run of ``fast_experiment`` (the fast protocol) of the same model,
    variant, training size, seed and beta. Per job: the final per-datum objective of both (fast <= paper +
    1e-3 is the target) and both training times; per (model, size): the beta validation selects among
    the paired betas under each protocol, its test NLL (mean +- SE over seeds), and the measured seconds
    per job, whose ratio is the speed-up of the fast protocol on that job shape."""
    from gpdlm_cli.analysis import store

    client, uri = store.open_store(uri)

    def runs(name):
        return store.load_runs(client, store.get_experiment(client, name, uri), notes=[])

    key = ("model.name", "model.variant", "train_size", "seed", "objective.beta")
    fast = {tuple(r.value(k) for k in key): r for r in runs(fast_experiment) if r.tags.get("gpdlm.protocol") == "fast"}
    rows = []
    for r in runs(paper_experiment):
        k = tuple(r.value(x) for x in key)
        f = fast.get(k)
        if f is None or r.tags.get("gpdlm.protocol") != "paper" or f.tags.get("gpdlm.protocol") != "fast":
            continue
        rows.append(
            {
                "model": f"{k[0]}_{k[1]}",
                "n": int(k[2]),
                "seed": int(k[3]),
                "beta": float(k[4]),
                "paper_loss": r.metrics["final_loss"],
                "fast_loss": f.metrics["final_loss"],
                "paper_iters": r.metrics["iterations"],
                "fast_iters": f.metrics["iterations"],
                "paper_s": r.metrics["train_seconds"],
                "fast_s": f.metrics["train_seconds"],
                "paper_val_nll": r.metrics["val_nll"],
                "fast_val_nll": f.metrics["val_nll"],
                "paper_test_nll": r.metrics["test_nll"],
                "fast_test_nll": f.metrics["test_nll"],
            }
        )
    rows.sort(key=lambda r: (r["model"], r["n"], r["seed"], -r["beta"]))
    print(
        f"{'model':<11} {'n':>5} {'seed':>4} {'beta':>9} | {'paper loss':>10} {'its':>5} {'s':>6} | "
        f"{'fast loss':>10} {'its':>5} {'s':>6} | fast - paper"
    )
    for r in rows:
        d = r["fast_loss"] - r["paper_loss"]
        print(
            f"{r['model']:<11} {r['n']:>5} {r['seed']:>4} {r['beta']:>9.4g} | {r['paper_loss']:>10.5f} "
            f"{r['paper_iters']:>5.0f} {r['paper_s']:>6.1f} | {r['fast_loss']:>10.5f} {r['fast_iters']:>5.0f} "
            f"{r['fast_s']:>6.1f} | {d:+.5f} {'ok' if d <= 1e-3 else 'HIGHER'}"
        )
    ok = sum(r["fast_loss"] <= r["paper_loss"] + 1e-3 for r in rows)
    print(f"fast <= paper + 1e-3 per datum in {ok} of {len(rows)} jobs")
    for model, n in sorted({(r["model"], r["n"]) for r in rows}):
        mine = [r for r in rows if r["model"] == model and r["n"] == n]
        line = [f"{model:<11} n={n:<5}"]
        for proto in ("paper", "fast"):
            picks = []
            for seed in sorted({r["seed"] for r in mine}):
                best = min((r for r in mine if r["seed"] == seed), key=lambda r: r[f"{proto}_val_nll"])
                picks.append((best["beta"], best[f"{proto}_test_nll"]))
            t = [p[1] for p in picks]
            se = statistics.stdev(t) / len(t) ** 0.5 if len(t) > 1 else float("nan")
            line.append(f"{proto}: betas {[f'{p[0]:g}' for p in picks]} test NLL {statistics.fmean(t):.4f} +- {se:.4f}")
        ps, fs = statistics.fmean(r["paper_s"] for r in mine), statistics.fmean(r["fast_s"] for r in mine)
        line.append(f"s/job paper {ps:.1f}, fast {fs:.1f}: x{ps / max(fs, 1e-9):.1f}")
        print("  ".join(line))
    return rows


#: Shoham & Avron Tables 2/4: the 8 mirrored sets and their sizes (rows; the uci_datasets masks train on 90%)
RKHS_SETS = {
    "bike": 17379,
    "elevators": 16599,
    "keggdirected": 48827,
    "keggundirected": 63608,
    "kin40k": 40000,
    "pol": 15000,
    "protein": 45730,
    "tamielectric": 45781,
}
RKHS_METHODS = ("scgd", "minimax", "bsgd", "svgp")


def rkhs_study_steps(b: int, epochs: int = 100, masks: int = 5, lrs: int = 3) -> int:
    """Steps of one method at batch size b over the study: sum over sets of epochs floor(0.9 N / b), x masks x lrs."""
    return masks * lrs * sum(epochs * (int(0.9 * n) // b) for n in RKHS_SETS.values())


def rkhs_evaluation_seconds(n: int = 4096, rounds: int = 5) -> float:
    """CPU seconds of one evaluation of an RKHS run (full-data train_nlml: the streamed O(n d^2) pass, and the
    test predictive on n/9 rows) at n rows, the paper's network and linear kernel; median of ``rounds``."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    import bench_rkhs_step

    data = bench_rkhs_step.synthetic(n)
    r = bench_rkhs_step.Runner("scgd", 32, True, data)
    model = r.m.model
    x_test = data.x_train[: n // 9]
    out = []
    for _ in range(rounds):
        with torch.no_grad():
            next(model.parameters()).add_(0.0)  # a new parameter version: the posterior is recomputed
        t = time.process_time()
        model.nlml()
        model.marginals(x_test)
        out.append(time.process_time() - t)
    return statistics.median(out)


#: the methods ``sweep.batched=true`` trains batched in the RKHS study (``methods.rkhs.batched_scope``, and SVGP on
#: minibatches with AdaDelta: ``methods.sparse_variational.batched_trainer``) and the plan's group: a shape's
#: members differ in mask and learning rate only, so each (set, method, b) is one batch of 5 masks x 3 lr
RKHS_BATCHED = ("scgd", "minimax", "bsgd", "svgp")
RKHS_GROUP = 15


def _rkhs_timings(bs, steps: int, rounds: int, batched: bool) -> dict:
    """CPU ms per step of every (method, b, path): path False = reference, True = fast (``bench_rkhs_step``),
    "batched" = per member of a batch of ``RKHS_GROUP`` members (``bench_batched``); all in the same rounds."""
    import bench_batched
    import bench_rkhs_step

    data = bench_rkhs_step.synthetic(4096)
    runners = {}
    for method in RKHS_METHODS:
        for b in bs:
            for fast in (False, True):
                r = bench_rkhs_step.Runner(method, b, fast, data)
                r.run(5)
                runners[(method, b, fast)] = lambda k, r=r: 1000 * r.run(k) / k
            if batched and method in RKHS_BATCHED:
                lrs = bench_batched.RKHS_LRS
                group = [bench_batched.rkhs_member(method, b, s, lrs[s % 3], 4096) for s in range(RKHS_GROUP)]
                bench_batched.rkhs_batched_seconds(group, 5)
                runners[(method, b, "batched")] = lambda k, g=group: (
                    1000 * bench_batched.rkhs_batched_seconds(g, k) / k / len(g)
                )
    times = {k: [] for k in runners}
    for _ in range(rounds):
        for k, timed in runners.items():
            times[k].append(timed(steps))
    return {k: statistics.median(v) for k, v in times.items()}


def project_rkhs(
    bs=(32, 64, 128),
    steps: int = 100,
    rounds: int = 5,
    startup_s: float = 6.0,
    batching_factor: float | None = None,
    batched: bool = False,
) -> list[dict]:
    """The RKHS Tables 2/4 projection (module docstring), printed and returned as rows. ``batched``: also time
    batched members (``RKHS_GROUP`` a batch, ``sweep.batched_rkhs``) in the same rounds and project the study
    with the batchable methods batched (``RKHS_BATCHED``: all four)."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    ms = _rkhs_timings(bs, steps, rounds, batched)
    eval_s = rkhs_evaluation_seconds()
    n_train = sum(int(0.9 * n) for n in RKHS_SETS.values())
    runs = len(RKHS_SETS) * 5 * len(RKHS_METHODS) * len(bs) * 3
    eval_hours = 5 * len(RKHS_METHODS) * len(bs) * 3 * 100 * eval_s * n_train / 4096 / 3600
    start_hours = runs * startup_s / 3600
    paths = (False, True, "batched") if batched else (False, True)
    rows, total = [], {path: 0.0 for path in paths}
    print(
        f"RKHS Tables 2/4: {runs} runs, 100 epochs; CPU ms/step median of {rounds} rounds x {steps} steps "
        f"(1 thread, reference, fast{' and batched' if batched else ''} in the same rounds)"
    )
    print(
        f"{'method':<8} {'b':>4} {'steps (M)':>9} {'ref ms':>7} {'fast ms':>7}"
        + (f" {'bat ms':>7}" if batched else "")
        + f" {'ref h':>7} {'fast h':>7}"
        + (f" {'bat h':>7}" if batched else "")
    )
    for method in RKHS_METHODS:
        for b in bs:
            n_steps = rkhs_study_steps(b)
            t = {path: ms.get((method, b, path), ms[(method, b, True)]) for path in paths}  # not batched: fast
            hours = {path: n_steps * t[path] / 1000 / 3600 for path in paths}
            for path in paths:
                total[path] += hours[path]
            row = dict(study="rkhs_tables_2_4", method=method, b=b, steps=n_steps, ref_ms=t[False], fast_ms=t[True])
            row.update(ref_hours=hours[False], fast_hours=hours[True])
            if batched:
                row.update(batched_ms=t["batched"], batched_hours=hours["batched"])
            rows.append(row)
            print(
                f"{method:<8} {b:>4} {n_steps / 1e6:9.2f} {t[False]:7.2f} {t[True]:7.2f}"
                + (f" {t['batched']:7.2f}" if batched else "")
                + f" {hours[False]:7.1f} {hours[True]:7.1f}"
                + (f" {hours['batched']:7.1f}" if batched else ""),
                flush=True,
            )
    print(
        f"evaluations: 100 per run, {eval_s * 1000:.0f} ms at n = 4096 (linear in n): {eval_hours:.1f} core-h; "
        f"start-up {startup_s:g} s per run: {start_hours:.1f} core-h"
    )
    for path in paths:
        core = total[path] + eval_hours + start_hours
        name = {False: "reference", True: "fast", "batched": f"batched ({RKHS_GROUP} members a batch)"}[path]
        line = f"{name}: steps {total[path]:.1f} core-h + evaluations + start-up = {core:.1f} core-h, {core / 2:.1f} h on 2 cores"
        if batching_factor and path is True:
            scaled = total[path] * batching_factor + eval_hours + start_hours
            line += f"; with batched configurations (x{batching_factor:g} per member on the steps): {scaled / 2:.1f} h"
        print(line)
        rows.append(
            dict(
                study="rkhs_tables_2_4",
                method="total",
                path=name,
                step_hours=total[path],
                eval_hours=eval_hours,
                startup_hours=start_hours,
                core_hours=core,
                hours_2_cores=core / 2,
            )
        )
    return rows


def rkhs_chunk(path: str, bs=(32, 128), steps: int = 100, rounds: int = 5, startup_s: float = 6.0) -> list[dict]:
    """The projection's per-run formula against the runs of a chunk actually run (issue 41: "the measured wall
    time of the chunks"): for every FINISHED, not resumed RKHS run of the run-records file ``path`` (``gpdlm
    export``), projected seconds = its iterations x the fast path's CPU ms per step at its b (timed here, one
    thread, as ``project_rkhs``) + an evaluation per epoch (timed at n = 4096, linear in its training rows) +
    ``startup_s``; measured = the run's start to end. Prints per (method, b) and in all: projected / measured."""
    sys.path.insert(0, str(__import__("pathlib").Path(__file__).resolve().parent))
    from gpdlm_cli.analysis.export import read

    runs = []
    for e in read(path).entries:
        p, m, tags = e.get("params", {}), e.get("metrics", {}), e.get("tags", {})
        method = p.get("model.name")
        if e.get("status") != "FINISHED" or method not in RKHS_METHODS or "gpdlm.resumed_from" in tags:
            continue
        runs.append((method, int(p["trainer.batch_size"]), e, float(m["iterations"]), float(m["n_train"])))
    if not runs:
        raise SystemExit(f"{path}: no finished, not resumed RKHS runs")
    ms = _rkhs_timings(sorted({b for _, b, *_ in runs}), steps, rounds, batched=False)
    eval_s = rkhs_evaluation_seconds()
    groups: dict = {}
    for method, b, e, iters, n in runs:
        epochs = float(e["params"].get("trainer.max_epochs") or 0)
        projected = iters * ms[(method, b, True)] / 1000 + epochs * eval_s * n / 4096 + startup_s
        measured = (e["end_time"] - e["start_time"]) / 1000
        g = groups.setdefault((method, b), [0, 0.0, 0.0])
        g[0], g[1], g[2] = g[0] + 1, g[1] + projected, g[2] + measured
    rows = []
    print(f"RKHS chunk {path}: projected (fast path, timed now) against measured start-to-end, per (method, b)")
    print(f"{'method':<8} {'b':>4} {'runs':>5} {'ms/step':>8} {'proj. h':>8} {'meas. h':>8} {'ratio':>6}")
    for (method, b), (k, proj, meas) in sorted(groups.items()):
        print(
            f"{method:<8} {b:>4} {k:>5} {ms[(method, b, True)]:8.2f} {proj / 3600:8.2f} {meas / 3600:8.2f} {proj / meas:6.2f}"
        )
        rows.append(dict(study="rkhs_chunk", method=method, b=b, runs=k, projected_s=proj, measured_s=meas))
    proj = sum(r["projected_s"] for r in rows)
    meas = sum(r["measured_s"] for r in rows)
    print(
        f"all {sum(r['runs'] for r in rows)} runs: projected {proj / 3600:.2f} h, measured {meas / 3600:.2f} h (one job at a time), projected / measured {proj / meas:.2f}"
    )
    rows.append(dict(study="rkhs_chunk", method="total", runs=len(runs), projected_s=proj, measured_s=meas))
    return rows


PAPER_PRESETS = {
    # preset, the sweep's axes sampled (others fixed), the axis that multiplies runs without changing their cost
    "gplstm": ("gplstm_sysid", "seed"),
    "svbssgp": ("svbssgp_aimpeak", "seed"),
}


def _timed_run(overrides) -> float:
    """CPU seconds of this process for one whole ``run_train`` call (tracking off)."""
    import tempfile
    from pathlib import Path

    from gpdlm_cli.run.train import run_train
    from gpdlm_cli.tracking import NullTracker

    cfg = compose(list(overrides))
    with tempfile.TemporaryDirectory() as tmp:
        t = time.process_time()
        run_train(cfg, Path(tmp), tracker=NullTracker())
        return time.process_time() - t


def project_preset(paper: str, sample: list[str] | None = None, extra=()) -> list[dict]:
    """A paper's study projected from three short real runs of each sampled configuration (module docstring):
    after a warm-up run (imports, the data cache), (a) 1 epoch, (b) 2 epochs, (c) 2 epochs evaluated after the
    first as well, all in CPU seconds, so that one
    epoch = b - a, one evaluation = c - b and the fixed cost of a run (start, data, final evaluation) = a - epoch.
    ``sample``: 'key=value,key=value' points of the preset's sweep (default: every configuration once)."""
    import itertools

    preset, repeat_axis = PAPER_PRESETS[paper]
    axes = preset_axes(preset)
    cfg0 = compose([f"+experiment={preset}"])
    epochs = int(cfg0.trainer.max_epochs)
    every = int(cfg0.trainer.eval_every_epochs or 0)
    repeats = len(axes.get(repeat_axis, ["0"]))
    grid = [dict(zip(axes, v)) for v in itertools.product(*axes.values())]
    configs = {tuple((k, v) for k, v in point.items() if k != repeat_axis) for point in grid}
    if sample:
        points = [tuple(tuple(kv.split("=", 1)) for kv in s.split(",")) for s in sample]
    else:
        points = sorted(configs)
    base = [f"+experiment={preset}", "progress=false", "tracking.enabled=false", "threads=1", *extra]
    rows, measured = [], []
    print(f"{paper}: preset {preset}, {len(configs)} configurations x {repeats} ({repeat_axis}), {epochs} epochs")
    for point in points:
        ov = base + [f"{k}={v}" for k, v in point] + ["trainer.eval_every=0", "trainer.keep_best=null"]
        _timed_run(ov + ["trainer.max_epochs=1", "trainer.eval_every_epochs=null"])  # warm-up: imports, data cache
        a = _timed_run(ov + ["trainer.max_epochs=1", "trainer.eval_every_epochs=null"])
        b = _timed_run(ov + ["trainer.max_epochs=2", "trainer.eval_every_epochs=null"])
        c = _timed_run(ov + ["trainer.max_epochs=2", "trainer.eval_every_epochs=1"])
        epoch_s, eval_s = max(0.0, b - a), max(0.0, c - b)
        in_loop = (epochs - 1) // every if every else 0
        run_s = a + (epochs - 1) * epoch_s + in_loop * eval_s
        measured.append(run_s)
        row = dict(
            study=paper,
            config=",".join(f"{k}={v}" for k, v in point),
            epoch_s=epoch_s,
            eval_s=eval_s,
            fixed_s=a - epoch_s,
            run_s=run_s,
            eval_share=in_loop * eval_s / run_s,
        )
        rows.append(row)
        print(
            f"  {row['config']:<60} epoch {epoch_s:7.2f} s  evaluation {eval_s:6.2f} s  fixed {row['fixed_s']:6.1f} s"
            f"  run {run_s / 60:6.1f} min (evaluation {100 * row['eval_share']:.0f}%)",
            flush=True,
        )
    mean = statistics.mean(measured)
    core = mean * len(configs) * repeats / 3600
    print(
        f"{paper}: {len(configs) * repeats} runs x {mean / 60:.1f} min (mean of {len(measured)} sampled configurations) "
        f"= {core:.1f} core-h, {core / 2:.1f} h on 2 cores"
    )
    rows.append(dict(study=paper, config="total", runs=len(configs) * repeats, core_hours=core, hours_2_cores=core / 2))
    return rows


def main(argv=None):
    p = argparse.ArgumentParser(prog="bench_study", description=__doc__.splitlines()[0])
    p.add_argument("--project", nargs="*", default=None, help="presets to project (default: regression_logloss_pol)")
    p.add_argument("--equivalence", action="store_true")
    p.add_argument("--preset", default="regression_logloss_pol")
    p.add_argument("--sizes", nargs="*", type=int, default=None)
    p.add_argument("--seeds", nargs="*", type=int, default=None)
    p.add_argument(
        "--betas",
        type=int,
        default=4,
        help="betas per (model, size, seed), spread over the paper's grid (equivalence: 0 = the preset's own beta)",
    )
    p.add_argument("--models", nargs="*", default=None, help="default: the preset's models")
    p.add_argument("--csv", default=None)
    p.add_argument(
        "--from-store",
        default=None,
        metavar="URI",
        help="pair the paper protocol's runs with the fast protocol's in this MLflow store (no training)",
    )
    p.add_argument(
        "--paper-share-store",
        default=None,
        metavar="URI",
        help="projection: scale the paper budget by the iterations its runs in this store used "
        "(experiment protocol_equivalence_pol)",
    )
    p.add_argument(
        "--set",
        nargs="*",
        default=[],
        metavar="KEY=VALUE",
        help="overrides added to every job (e.g. dataset=doctor_visits)",
    )
    p.add_argument(
        "--paper-share",
        nargs="*",
        default=[],
        metavar="MODEL=SHARE",
        help="projection: the paper budget's share its real runs used, per model name (e.g. dlm=0.73 "
        "svgp=0.58, the 114 runs of docs/performance.md), where no --paper-share-store is at hand",
    )
    p.add_argument(
        "--paper-code",
        default=None,
        metavar="DIR",
        help="projection: also time the paper protocol with the gpdlm code of this checkout (a subprocess)",
    )
    p.add_argument(
        "--two-workers",
        type=int,
        default=0,
        metavar="ITERS",
        help="projection with --paper-code: also measure how each shape's paper-protocol job scales to two "
        "concurrent workers, over ITERS iterations (300 is enough)",
    )
    p.add_argument("--warm", action="store_true", help="fast jobs warm-started along the path")
    p.add_argument("--fast-experiment", default="regression_logloss_pol")
    p.add_argument("--paper-experiment", default="protocol_equivalence_pol")
    p.add_argument("--paper", choices=["rkhs", "gplstm", "svbssgp"], default=None, help="another paper's study")
    p.add_argument("--sample", nargs="*", default=None, help="--paper gplstm|svbssgp: 'key=v,key=v' points")
    p.add_argument("--b", type=int, nargs="*", default=[32, 64, 128], help="--paper rkhs: batch sizes")
    p.add_argument("--steps", type=int, default=100, help="--paper rkhs: steps per timed round")
    p.add_argument("--rounds", type=int, default=5, help="--paper rkhs: timed rounds")
    p.add_argument("--startup-s", type=float, default=6.0, help="--paper rkhs: fixed seconds per run")
    p.add_argument("--batching-factor", type=float, default=None, help="--paper rkhs: per-member cost when batched")
    p.add_argument(
        "--batched", action="store_true", help="--paper rkhs: also time batched members (sweep.batched) and project"
    )
    p.add_argument("--chunk", default=None, help="--paper rkhs: run records of a chunk run: projected vs measured")
    a = p.parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(1)
    t0 = time.time()
    if a.paper == "rkhs" and a.chunk:
        rows = rkhs_chunk(a.chunk, steps=a.steps, rounds=a.rounds, startup_s=a.startup_s)
    elif a.paper == "rkhs":
        rows = project_rkhs(a.b, a.steps, a.rounds, a.startup_s, a.batching_factor, a.batched)
    elif a.paper:
        rows = project_preset(a.paper, a.sample, a.set)
    elif a.from_store:
        rows = from_store(a.from_store, a.fast_experiment, a.paper_experiment)
    elif a.equivalence:
        rows = equivalence(
            a.preset,
            a.sizes or [500],
            a.seeds if a.seeds is not None else [0],
            a.betas,
            a.models,
            warm=a.warm,
            extra=a.set,
        )
    else:
        rows = []
        share = paper_iteration_share(a.paper_share_store)
        share.update({k: float(v) for k, v in (kv.split("=", 1) for kv in a.paper_share)})
        for preset in a.project or ["regression_logloss_pol"]:
            rows += project(
                preset,
                a.sizes,
                a.seeds,
                a.betas,
                share,
                warm=a.warm,
                extra=a.set,
                models=a.models,
                paper_code=a.paper_code,
                two_workers=a.two_workers,
            )
    if a.csv and rows:
        with open(a.csv, "a", newline="") as f:
            w = csv.DictWriter(f, fieldnames=list(dict.fromkeys(k for r in rows for k in r)))
            if f.tell() == 0:
                w.writeheader()
            w.writerows(rows)
    print(f"({time.time() - t0:.0f} s)")


if __name__ == "__main__":
    main()
