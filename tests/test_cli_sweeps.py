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


def test_cfg_all_and_a_bad_cfg_type_with_multirun(capsys):
    rc = cli.main(["train", "--multirun", "model=dlm,svgp", "--cfg=all"])
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    jobs = _jobs_printed(captured.out)
    assert [yaml.safe_load(body)["model"]["name"] for _, body in jobs] == ["dlm", "svgp"]
    assert all("hydra" in yaml.safe_load(body) for _, body in jobs)
    assert cli.main(["train", "-m", "model=dlm,svgp", "--cfg", "jobs"]) == 2
    assert capsys.readouterr().err.strip() == "gpdlm: error: --cfg takes job, hydra or all; got 'jobs'"
