"""The pyfunc flavour of a gpdlm run and the MLflow Model directory that holds it (``run.serving``
describes what it predicts and how it is loaded). Imports ``mlflow.pyfunc``: only the end of a
training run and MLflow's loader import this module."""

from __future__ import annotations

import functools
import shutil
from pathlib import Path

import mlflow.pyfunc
from mlflow.pyfunc.model import PythonModel  # its home (mlflow.pyfunc does not re-export it)

from .serving import DEFAULT_LEVEL, output_columns, predict_rows

# the runtime packages a loaded model imports (their installed versions are pinned in the MLmodel's requirements)
REQUIREMENTS = (
    "gpdlm",
    "torch",
    "gpytorch",
    "linear_operator",
    "mlflow",
    "pandas",
    "numpy",
    "omegaconf",
    "hydra-core",
    "scipy",
    "scikit-learn",
)


class GpdlmPyfunc(PythonModel):
    """A gpdlm run as a pyfunc model: ``predict(DataFrame of the training table's feature columns,
    params={"level": 0.9})`` -> DataFrame of ``serving.output_columns`` (original units)."""

    def load_context(self, context):
        import tempfile

        from .saved_model import MODEL_FILE, load_run

        src = Path(context.artifacts["model_file"])
        if src.name == MODEL_FILE:
            folder = src.parent
        else:  # load_run reads <folder>/model.pt
            folder = Path(tempfile.mkdtemp(prefix="gpdlm-model-"))
            shutil.copyfile(src, folder / MODEL_FILE)
        self.run = load_run(folder)

    _skip_type_hint_validation = True  # no type hints: the explicit signature describes the input

    def predict(self, context, model_input, params=None):
        import numpy as np
        import pandas as pd

        level = float((params or {}).get("level", DEFAULT_LEVEL))
        if not 0 < level < 1:
            raise ValueError(f"level must be in (0, 1); got {level}")
        names = list(self.run.meta["feature_names"])
        frame = model_input if isinstance(model_input, pd.DataFrame) else pd.DataFrame(model_input, columns=names)
        missing = [c for c in names if c not in frame.columns]
        if missing:
            raise ValueError(f"the model takes the columns {', '.join(names)}; missing {', '.join(missing)}")
        X = frame[names].to_numpy(dtype=float)
        if not np.isfinite(X).all():
            raise ValueError("the input holds a value that is not a finite number")
        return pd.DataFrame(predict_rows(self.run, X, level))


CODE_FILE = "gpdlm_model.py"  # MLflow's models-from-code: the model is built by this file, nothing is unpickled
CODE = """# the pyfunc model of a gpdlm run (MLflow models-from-code; gpdlm_cli.run.pyfunc)
from mlflow.models import set_model

from gpdlm_cli.run.pyfunc import GpdlmPyfunc

set_model(GpdlmPyfunc())
"""


@functools.lru_cache(maxsize=1)
def requirements() -> tuple[str, ...]:
    """``name==version`` of the installed runtime packages (``REQUIREMENTS``); gpdlm itself unpinned
    when it is not installed as a distribution. Once per process."""
    from importlib.metadata import PackageNotFoundError, version

    out = []
    for name in REQUIREMENTS:
        try:
            out.append(f"{name}=={version(name)}")
        except PackageNotFoundError:
            if name == "gpdlm":
                out.append(name)
    return tuple(out)


@functools.lru_cache(maxsize=1)
def _environment_files() -> dict[str, str]:
    """requirements.txt, python_env.yaml and conda.yaml of every model this process saves (the same
    files ``mlflow.pyfunc.save_model`` writes for explicit pip requirements), computed once."""
    import platform
    from importlib.metadata import PackageNotFoundError, version

    import yaml

    def pinned(name: str) -> str:
        try:
            return f"{name}=={version(name)}"
        except PackageNotFoundError:
            return name

    py = platform.python_version()
    reqs = list(requirements())
    return {
        "requirements.txt": "\n".join(reqs),
        "python_env.yaml": yaml.safe_dump(
            {
                "python": py,
                "build_dependencies": [pinned("pip"), pinned("setuptools"), "wheel"],
                "dependencies": ["-r requirements.txt"],
            },
            sort_keys=False,
        ),
        "conda.yaml": yaml.safe_dump(
            {"channels": ["conda-forge"], "dependencies": [f"python={py}", "pip", {"pip": reqs}], "name": "mlflow-env"},
            sort_keys=False,
        ),
    }


def save_mlflow_model(folder, model_file, feature_names, task: str, example) -> Path:
    """Write the MLflow Model of a run into ``folder`` (replaced if it exists), as
    ``mlflow.pyfunc.save_model`` would for a models-from-code pyfunc with explicit pip requirements,
    but without its per-model requirement checks (~0.2 s a model): ``MLmodel`` (the pyfunc flavour,
    its signature -- feature columns as doubles in, ``output_columns(task)`` out, parameter
    ``level`` -- and the input example's description), ``gpdlm_model.py`` (builds ``GpdlmPyfunc``),
    ``artifacts/model.pt`` (a copy of ``model_file``), ``input_example.json`` and
    ``serving_input_example.json`` (``example``: a few training rows, original units) and the
    environment files."""
    import json
    import os

    import cloudpickle
    import numpy as np
    from mlflow.models import Model, ModelSignature
    from mlflow.types import ColSpec, ParamSchema, ParamSpec, Schema

    folder = Path(folder)
    if folder.exists():
        shutil.rmtree(folder)
    (folder / "artifacts").mkdir(parents=True)
    names = [str(n) for n in feature_names]
    signature = ModelSignature(
        inputs=Schema([ColSpec("double", n) for n in names]),
        outputs=Schema([ColSpec("double", c) for c in output_columns(task)]),
        params=ParamSchema([ParamSpec("level", "double", DEFAULT_LEVEL)]),
    )
    split = {"columns": names, "data": np.asarray(example, dtype=float).tolist()}
    (folder / "input_example.json").write_text(json.dumps(split))
    (folder / "serving_input_example.json").write_text(json.dumps({"dataframe_split": split}, indent=2))
    shutil.copyfile(model_file, folder / "artifacts" / Path(model_file).name)
    (folder / CODE_FILE).write_text(CODE)
    for name, text in _environment_files().items():
        (folder / name).write_text(text)
    model = Model(
        signature=signature,
        saved_input_example_info={
            "artifact_path": "input_example.json",
            "type": "dataframe",
            "pandas_orient": "split",
            "serving_input_path": "serving_input_example.json",
        },
    )
    mlflow.pyfunc.add_to_model(
        model,
        loader_module="mlflow.pyfunc.loaders.code_model",
        code=None,
        conda_env="conda.yaml",
        python_env="python_env.yaml",
        streamable=False,
        model_code_path=CODE_FILE,
        cloudpickle_version=cloudpickle.__version__,
        artifacts={"model_file": {"path": f"artifacts/{Path(model_file).name}"}},
    )
    model.model_size_bytes = sum(f.stat().st_size for f in folder.rglob("*") if f.is_file())
    model.save(os.fspath(folder / "MLmodel"))
    return folder


__all__ = ["CODE_FILE", "GpdlmPyfunc", "REQUIREMENTS", "requirements", "save_mlflow_model"]
