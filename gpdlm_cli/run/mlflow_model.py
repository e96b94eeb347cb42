"""The end of a training run: its model as an MLflow Model (``model/`` in the run folder, logged
under the artifact path ``model``; ``run.serving`` says what it predicts, ``run.pyfunc`` writes it).
Imports nothing of MLflow until a model is written: a run with tracking off writes none."""

from __future__ import annotations

from .serving import MODEL_DIR, mlflow_model_support


def write_mlflow_model(run, method, splits) -> tuple[str, ...]:
    """The MLflow Model of a finished run in ``<run folder>/model`` (``run``: the ``TrackedRun``,
    whose ``model.pt`` is written): the names of the result files to log (``("model",)``, or none when
    the family has no row predictive or writing failed -- the run keeps its results either way: the
    reason goes to the tag ``gpdlm.mlflow_model`` and to gpdlm.log)."""
    from .artifacts import append_log
    from .saved_model import MODEL_FILE

    folder = run.output_dir
    why = mlflow_model_support(splits.task, method)
    if why is None and getattr(run.tracker, "run_id", None) is None:
        why = "tracking is off (tracking.enabled=false): model.pt only"  # MLflow is not even imported then
    if why is None and not (folder / MODEL_FILE).is_file():
        why = f"{MODEL_FILE} was not written"
    if why is None:
        try:
            from .pyfunc import save_mlflow_model  # imports mlflow.pyfunc: only when a model is written

            example = splits.X_train[:2] * splits.x_std + splits.x_mean
            save_mlflow_model(folder / MODEL_DIR, folder / MODEL_FILE, list(splits.feature_names), splits.task, example)
        except Exception as e:  # noqa: BLE001 - the trained model is saved in model.pt all the same
            why = f"not written: {type(e).__name__}: {str(e).strip().splitlines()[0] if str(e).strip() else ''}"
            append_log(folder, f"MLflow Model {why} (model.pt and gpdlm predict are unaffected)", level="WARNING")
    run.tracker.set_tags({"gpdlm.mlflow_model": MODEL_DIR if why is None else f"none: {why}"})
    return (MODEL_DIR,) if why is None else ()


__all__ = ["write_mlflow_model"]
