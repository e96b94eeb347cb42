"""Sweeps at the command line: ``--cfg`` with ``-m`` prints every job's config (Hydra refuses the pair), and
``gpdlm sweep beta`` takes a preset's own split values into its grid."""

from __future__ import annotations

import pytest
import yaml

from gpdlm_cli import cli


def _jobs_printed(out: str) -> list[tuple[str, str]]:
    """(the ``# job i of N: ...`` line, the YAML after it) for every job in ``out``."""
    parts = out.split("# job ")[1:]
    return [(p.split("\n", 1)[0], p.split("\n", 1)[1]) for p in parts]


@pytest.mark.slow  # ~5 s: four jobs composed
def test_cfg_job_with_multirun_prints_every_jobs_config(capsys):
    """Hydra ends ``--cfg job`` with ``-m`` in "Only one of --run, --multirun, --cfg ... can be specified"
    (a traceback through gpdlm); gpdlm prints each job's config (here its trainer package), one per job."""
    rc = cli.main(["train", "-m", "model=dlm,svgp", "trainer.max_iters=7,9", "--cfg", "job", "-p", "trainer"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    jobs = _jobs_printed(captured.out)
    assert [head for head, _ in jobs] == [
        "1 of 4: model=dlm trainer.max_iters=7",
        "2 of 4: model=dlm trainer.max_iters=9",
        "3 of 4: model=svgp trainer.max_iters=7",
        "4 of 4: model=svgp trainer.max_iters=9",
    ]
    for (_, body), iters in zip(jobs, (7, 9, 7, 9), strict=True):
        assert body.startswith("# @package trainer\n")
        assert yaml.safe_load(body)["max_iters"] == iters
    assert "Traceback" not in captured.err


@pytest.mark.slow
def test_cfg_all_and_a_bad_cfg_type_with_multirun(capsys):
    rc = cli.main(["train", "--multirun", "model=dlm,svgp", "--cfg=all"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    jobs = _jobs_printed(captured.out)
    assert [yaml.safe_load(body)["model"]["name"] for _, body in jobs] == ["dlm", "svgp"]
    assert all("hydra" in yaml.safe_load(body) for _, body in jobs)
    assert cli.main(["train", "-m", "model=dlm,svgp", "--cfg", "jobs"]) == 2
    assert capsys.readouterr().err.strip() == "gpdlm: error: --cfg takes job, hydra or all; got 'jobs'"


@pytest.mark.slow  # ~8 s: the data loaded for n, four jobs composed
def test_sweep_beta_of_a_preset_uses_the_presets_training_size(capsys):
    """classification_smoke sets dataset.split.train_size=100 in its sweeper params (one value: not a
    pin); the grid's n was composed without it ("ringnorm (1000 rows) leaves -100 training rows")."""
    from gpdlm_cli.commands.sweep import _format, beta_grid, sweep_overrides

    runs = sweep_overrides("beta", ["+experiment=classification_smoke"])
    grid = beta_grid(100)
    assert grid[0] == 100.0 and grid[-1] == 0.01
    assert runs == [["-m", "objective.beta=" + ",".join(_format(b) for b in grid), "+experiment=classification_smoke"]]
    argv = ["sweep", "beta", "+experiment=classification_smoke", "sweep.grid_min=50", "--cfg", "job", "-p", "dataset"]
    rc = cli.main(argv)
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    jobs = _jobs_printed(captured.out)
    assert [head.split(":")[0] for head, _ in jobs] == [f"{i} of 4" for i in (1, 2, 3, 4)]  # dlm, svgp x 100, 50
    assert [yaml.safe_load(body)["split"]["train_size"] for _, body in jobs] == [100] * 4
    assert [head.split("objective.beta=")[1].split()[0] for head, _ in jobs] == ["100.0", "50.0"] * 2
