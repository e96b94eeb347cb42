"""Which run RUN means for `gpdlm predict`, `eval` and `resume` (commands.resolve): an output folder,
a run id, the short id `gpdlm runs` prints (a unique prefix), or a run name -- quoted into MLflow's
filter, a `'` included; an ambiguous reference is refused with its candidates; the run used is named."""

from __future__ import annotations

import pytest
from mlflow.tracking import MlflowClient

from gpdlm_cli.analysis.records import AnalysisError
from gpdlm_cli.commands.resolve import resolve_run

from .conftest import copy_store, make_experiment, make_run


@pytest.fixture()
def store(template_db, tmp_path):
    uri = copy_store(template_db, tmp_path / "store")
    client = MlflowClient(uri)
    exp = make_experiment(client, uri, "res")
    other = make_experiment(client, uri, "other")

    def run(name, folder, exp_id=exp, start=None):
        (tmp_path / folder).mkdir(exist_ok=True)
        rid = make_run(
            client,
            exp_id,
            {"model.name": "dlm"},
            {"test_rmse": 1.0},
            start_time=start,
            tags={"gpdlm.output_dir": str(tmp_path / folder)},
        )
        client.set_tag(rid, "mlflow.runName", name)
        return rid

    return uri, run, tmp_path, other


def test_a_short_id_and_a_quoted_name_name_one_run(store, capsys):
    uri, run, tmp, other = store
    a = run("dlm-concrete-s0", "a")
    b = run("it's mine", "b", exp_id=other)
    c = run('say "hi" it\'s', "c")
    capsys.readouterr()
    assert resolve_run(a[:8], uri) == (tmp / "a", a)  # the 8 characters `gpdlm runs` prints
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"gpdlm: run {a[:8]} (dlm-concrete-s0, FINISHED, ") and err.endswith(
        f"experiment res) -> {tmp / 'a'}"
    )
    assert resolve_run(a, uri) == (tmp / "a", a)
    assert resolve_run("it's mine", uri) == (tmp / "b", b)  # MLflow's filter once failed on the quote
    assert resolve_run('say "hi" it\'s', uri) == (tmp / "c", c)
    assert resolve_run("dlm-concrete-s0", uri) == (tmp / "a", a)
    assert resolve_run(str(tmp / "b"), uri) == (tmp / "b", None)


def test_an_ambiguous_reference_is_refused_with_the_candidates(store):
    uri, run, tmp, other = store
    a = run("dlm-s0", "a", start=1000)
    b = run("dlm-s0", "b", start=2000)  # the same name, another folder: never silently the newest
    with pytest.raises(AnalysisError) as e:
        resolve_run("dlm-s0", uri)
    msg = str(e.value)
    assert msg.startswith("'dlm-s0' is ambiguous: 2 runs match: ")
    assert msg.index(b[:8]) < msg.index(a[:8]) and "give a longer run id prefix" in msg
    # a name that is another run's id prefix: both match
    c = run(a[:6], "c")
    with pytest.raises(AnalysisError, match=f"'{a[:6]}' is ambiguous: 2 runs match: .*{c[:8]}.*{a[:8]}"):
        resolve_run(a[:6], uri)
    with pytest.raises(AnalysisError, match="no run 'nosuch': not a folder, nor a run id, id prefix or run name"):
        resolve_run("nosuch", uri)


def test_a_run_and_its_resumed_continuation_share_a_folder(store, capsys):
    uri, run, tmp, other = store
    run("dlm-s0", "a", start=1000)
    newer = run("dlm-s0", "a", start=2000)
    capsys.readouterr()
    assert resolve_run("dlm-s0", uri) == (tmp / "a", newer)
    assert "the newest of 2 runs of that folder" in capsys.readouterr().err
