"""benchmarks/gpu_study.sh, the one device call prepared for issue 43, runs its path on the CPU at smoke scale
(GPU_SETUP=0 GPU_DEVICE=cpu GPU_SCALE=smoke): the pol part's reproduce, its run records read back and verified,
its report with the claims' verdict lines; so a lent GPU's 15 minutes do not go to a broken script."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpdlm_cli.analysis.export import read
from gpdlm_cli.commands import reproduce as rp

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_the_gpu_study_script_runs_its_pol_part_on_the_cpu_at_smoke_scale(tmp_path):
    if not rp.offline(rp.data_status("pol")):
        pytest.skip("pol is neither cached nor in $GPDLM_DATA_MIRROR")
    env = dict(
        os.environ,
        GPU_SETUP="0",
        GPU_DEVICE="cpu",
        GPU_SCALE="smoke",
        GPU_PARTS="pol",
        GPU_POL_CLAIMS="D1-beta-elbo-pol",
        GPU_WORK=str(tmp_path / "work"),
        OUT=str(tmp_path / "out"),
        PATH=f"{Path(sys.executable).parent}:{os.environ['PATH']}",
    )
    done = subprocess.run(
        ["bash", "benchmarks/gpu_study.sh"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600
    )
    assert done.returncode == 0, done.stderr[-2000:]
    out = tmp_path / "out"
    log = (out / "pol" / "reproduce.log").read_text()
    assert "rc=0 wall=" in log and "sweep.batched: trained" in log  # the batched path, not separate runs
    records = read(out / "pol" / "runs.jsonl.gz")  # verified: format, checksum, run count
    finished = [e for e in records.entries if e["status"] == "FINISHED"]
    assert len(finished) == 6 and all(
        e["steps"] == {} or "points" not in next(iter(e["steps"].values())) for e in finished
    )
    assert {e["params"]["device"] for e in finished} == {"cpu"}
    report = (out / "pol" / "report.md").read_text()
    assert "D1-beta-elbo-pol" in report and "smoke scale (not evidence)" in report
    assert "setup done in" in (out / "setup.log").read_text()
