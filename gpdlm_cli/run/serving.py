"""A run's model as an MLflow Model: ``mlflow.pyfunc.load_model("runs:/<id>/model")`` predicts what
``gpdlm predict`` predicts, so MLflow's registry, ``mlflow models serve`` and batch scoring can use
gpdlm's runs.

``predict_rows`` is the one predictive of a saved model on new rows (original units in, original
units out), shared by ``gpdlm predict`` and the pyfunc flavour:

* regression: ``mean``, ``variance`` (latent + noise) and the central ``level`` interval
  ``lower``/``upper`` of y;
* classification: ``p1`` = P(y = 1) and ``label``;
* counts: the predictive ``mean`` count and its central interval ``lower``/``upper``.

``run.pyfunc.save_mlflow_model`` (through ``run.mlflow_model.write_mlflow_model`` at the end of a tracked run) writes the MLflow Model directory (``model/`` in the run folder: ``MLmodel``
with the pyfunc flavour, the signature -- the training table's feature columns as doubles in,
the columns above out, the parameter ``level`` (default 0.9) -- an input example of two training
rows, and ``model.pt`` as its artifact). It is written by ``mlflow.pyfunc.save_model`` with explicit
``pip_requirements`` (the installed versions of gpdlm's runtime packages): no requirement inference
and no environment capture, which would load the model and scan imports for every run of a sweep.

Loading (``run.pyfunc.GpdlmPyfunc.load_context``) rebuilds the run as ``gpdlm predict`` does
(``run.saved_model.load_run``): the family's builder on the run's config and its dataset, which must
be available where the model is loaded (gpdlm's data cache; the fingerprint is verified). Families
that predict in their own way (the recurrent GPs' series, the gamma family, square-loss DLM's
completion) save no MLflow Model (``mlflow_model_support`` says why; tag ``gpdlm.mlflow_model``).
"""

from __future__ import annotations

import math

MODEL_DIR = "model"  # the MLflow Model's folder in the run folder, and its artifact path in the run
DEFAULT_LEVEL = 0.9


def output_columns(task: str) -> list[str]:
    return {"regression": ["mean", "variance", "lower", "upper"], "classification": ["p1", "label"]}.get(
        task, ["mean", "lower", "upper"]
    )


def mlflow_model_support(task: str, method) -> str | None:
    """None when a run's model can be an MLflow Model (rows in, a predictive out), else why not."""
    if str(task) == "sequence":
        return "a recurrent GP predicts a series (gpdlm predict reads its CSV)"
    if method.evaluate is not None:
        return "this family predicts in its own way (gpdlm eval recomputes its metrics)"
    return None


def predict_rows(run, X, level: float = DEFAULT_LEVEL) -> dict:
    """The predictive of the loaded run ``run`` (``saved_model.LoadedRun``) at the rows ``X`` (an
    array of the training table's feature columns, original units): {column: numpy array}, the
    columns of ``output_columns`` (module docstring)."""
    import numpy as np
    import torch

    from ..metrics import predictive_marginals

    meta, method = run.meta, run.method
    x_mean, x_std = np.asarray(meta["x_mean"]), np.asarray(meta["x_std"])
    x = torch.as_tensor(
        (np.asarray(X, dtype=float) - x_mean) / x_std, dtype=run.data.x_train.dtype, device=run.data.x_train.device
    )
    lik = method.likelihood
    with torch.no_grad():
        mu, var = predictive_marginals(method.model, x)
        z = float(torch.distributions.Normal(0.0, 1.0).icdf(torch.tensor(0.5 + level / 2, dtype=torch.float64)))
        task = run.splits.task
        if task == "regression":
            y_mean, y_std = float(meta["y_mean"][0]), float(meta["y_std"][0])
            pvar = var + lik.noise
            m, s = mu * y_std + y_mean, pvar.sqrt() * y_std
            out = {"mean": m, "variance": s**2, "lower": m - z * s, "upper": m + z * s}
        elif task == "classification":
            from ..estimators import QuadratureEstimator

            prob = lik.predictive_mean_closed(mu, var)
            if prob is None:
                prob = QuadratureEstimator(64).expectation(lik.mean, mu, var)
            out = {"p1": prob, "label": (prob > 0.5).to(prob.dtype)}
        else:
            from ..estimators import QuadratureEstimator

            quad = QuadratureEstimator(64)
            mean = quad.expectation(lik.mean, mu, var)
            lo_q, hi_q = (1 - level) / 2, 1 - (1 - level) / 2
            out = {
                "mean": mean,
                "lower": count_quantile(quad, lik, mu, var, lo_q),
                "upper": count_quantile(quad, lik, mu, var, hi_q),
            }
    return {k: v.detach().cpu().numpy() for k, v in out.items()}


def count_quantile(quad, lik, mu, var, q: float, k_max: int = 100000):
    """The smallest k with E_q[P(Y <= k | f)] >= q, per row (bisection on k)."""
    import torch

    def cdf(k):
        return quad.expectation(lambda f: torch.special.gammaincc(k.unsqueeze(-1) + 1, lik.mean(f)), mu, var)

    lo = torch.full_like(mu, -1.0)
    hi = torch.full_like(mu, float(k_max))
    for _ in range(int(math.log2(k_max)) + 2):
        mid = torch.floor((lo + hi) / 2)
        ok = (mid >= 0) & (cdf(mid.clamp_min(0)) >= q)
        hi = torch.where(ok, mid, hi)
        lo = torch.where(ok, lo, mid)
    return hi


__all__ = ["DEFAULT_LEVEL", "MODEL_DIR", "count_quantile", "mlflow_model_support", "output_columns", "predict_rows"]
