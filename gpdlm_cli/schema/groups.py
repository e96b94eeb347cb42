"""The schemas of gpdlm's config groups other than ``trainer`` and ``model``: the run's top-level
keys, ``objective``, ``sweep``, ``bias``, ``dataset`` (the keys every dataset has), ``tracking``,
``kernel``, ``likelihood``, ``estimator`` and ``features``.

Each is a frozen dataclass whose fields declare the key's type, range, choices and meaning once
(``schema.keys``); ``parse`` turns a config node into it. A dataset's own options and an estimator's
constructor arguments travel in ``extra``, checked against their schemas (``schema.options``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from ..exceptions import param_error
from ..validation import is_int, is_number
from .keys import anything, choice, flag, integer, listing, parse, real, text

#: the published test masks of a dataset that has them (``data.splits.N_MASKS``; a test keeps them equal)
N_MASKS = 10


def _threads_ok(v) -> bool:
    return v == "auto" or (is_int(v) and v >= 1)


@dataclass(frozen=True)
class RunKeys:
    """The top-level keys of a run."""

    seed: int = integer(
        0,
        lo=0,
        hi=2**63,
        hi_open=True,
        allowed="an integer in [0, 2^63)",
        help="fixes splits, initialisation and all sampling",
    )
    device: str = choice(
        "auto",
        ("auto", "cpu", "cuda"),
        allowed="'auto', 'cpu' or 'cuda'",
        help="auto = cuda when available; GPDLM_DEVICE sets the default",
    )
    dtype: str = choice(
        "float64",
        ("float32", "float64"),
        allowed="'float32' or 'float64'",
        help="the floating-point type of the model and data",
    )
    progress: bool = flag(True, help="tqdm progress bar (only ever drawn on a terminal)")
    threads: object = anything(
        "auto",
        test=_threads_ok,
        allowed="'auto' or an integer >= 1",
        help="torch CPU threads: auto = all cores, divided among parallel sweep jobs; or an int",
    )


@dataclass(frozen=True)
class ObjectiveSpec:
    """The ``objective`` group: the weight of the KL term."""

    beta: float = real(
        1.0,
        lo=0,
        lo_open=True,
        hi=math.inf,
        hi_open=True,
        allowed="a finite float in (0, inf)",
        help="KL weight: 1 = SVGP/DLM, other values = beta-ELBO / beta-DLM",
    )


@dataclass(frozen=True)
class SweepSpec:
    """The ``sweep`` group: how a multirun is organised (never what a run learns)."""

    skip_finished: bool = flag(
        False,
        help="multirun: skip jobs whose config hash already has a FINISHED run, continue a stopped one from its checkpoint",
    )
    finished_from: list = listing(
        [],
        help="skip_finished: run-records files (gpdlm export) whose FINISHED runs of the experiment count as finished too",
    )
    share_stages: bool = flag(True, help="train a beta-independent stage once per sweep and reuse it from cache_dir")
    warm_start: bool = flag(False, help="beta sweeps: each beta starts where the previous one ended")
    batched: bool = flag(False, help="jobs differing only in seed and beta train as one batched model")
    cache_dir: str = text("outputs/.cache", help="shared stages")
    grid_min: float = real(
        0.01,
        lo=0,
        lo_open=True,
        hi=math.inf,
        hi_open=True,
        allowed="a float in (0, inf)",
        help="`gpdlm sweep beta`: smallest beta of the grid",
    )
    factor: float = real(
        2.0,
        lo=1,
        lo_open=True,
        hi=math.inf,
        hi_open=True,
        allowed="a float in (1, inf)",
        help="`gpdlm sweep beta`: ratio between consecutive grid values",
    )
    objective: str = text(
        "auto", help="metric a multirun job returns to its sweeper (auto = the family's selection metric)"
    )


@dataclass(frozen=True)
class BiasSpec:
    """The ``bias`` group (``gpdlm bias``, docs/bias.md; ``gpdlm train`` ignores it)."""

    repetitions: int = integer(100, lo=1, help="R, gradient estimates compared with the reference")
    reference_nodes: int = integer(100, lo=2, help="adaptive Gauss-Hermite nodes of the reference gradient")
    bmc_reference_samples: int = integer(
        10000, lo=0, allowed="an integer >= 0 (0 = no bMC reference)", help="L of the paper's bMC reference; 0 = none"
    )
    batch: int | None = integer(
        None, lo=1, null="trainer.batch_size", help="rows for the gradient: null = trainer.batch_size"
    )


@dataclass(frozen=True)
class SplitSpec:
    """``dataset.split``: how the rows are split (row checks that need the data: ``data.splits``)."""

    val_fraction: float = real(0.0, lo=0, hi=1, hi_open=True, help="share of the rows for validation")
    test_fraction: float = real(0.0, lo=0, hi=1, hi_open=True, help="share of the rows for testing")
    train_size: int | None = integer(
        None,
        lo=0,
        null=True,
        allowed="a non-negative integer or null",
        help="subsample the training part to this many rows",
    )
    test_size: int | None = integer(
        None,
        lo=0,
        null=True,
        allowed="a non-negative integer or null",
        help="a fixed number of test rows instead of test_fraction",
    )
    mask: int | None = integer(
        None,
        lo=0,
        hi=N_MASKS - 1,
        null=True,
        allowed=f"an integer in 0..{N_MASKS - 1} (one of the {N_MASKS} published test masks) or null",
        help="0..9: test on published test mask k",
    )
    mask_val_fraction: float = real(
        0.0, lo=0, hi=1, hi_open=True, help="with mask: share of the training rows held out for validation"
    )


@dataclass(frozen=True)
class DatasetSpec:
    """The ``dataset`` group: its name, the keys every dataset has, and (``extra``) the dataset's own
    options, checked against its loader's schema (``schema.options.DATASET_OPTIONS``)."""

    name: str = text("concrete", help="a registered dataset (`gpdlm datasets list`)")
    standardize_y: bool | None = anything(
        None,
        test=lambda v: v is None or isinstance(v, bool),
        allowed="true, false or null (the task decides)",
        help="null = yes for regression targets",
    )
    missing: str | None = choice(None, ("drop", "error"), allowed="'drop' or 'error'", help="rows with missing values")
    split: dict = field(default_factory=dict)
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        from .options import check_options, dataset_options

        parse(self.split, SplitSpec, "dataset.split")  # its keys' types and ranges (rows: data.splits)
        schema = dataset_options(self.name)
        if schema is not None:  # the loader's own options (a loader registered from code checks its own)
            check_options(self.extra, schema, f"dataset={self.name}")

    @property
    def options(self) -> dict:
        """What the loader takes: every key but name, split and standardize_y."""
        out = dict(self.extra)
        if self.missing is not None:
            out["missing"] = self.missing
        return out


@dataclass(frozen=True)
class TrackingSpec:
    """The ``tracking`` group: where runs are recorded (MLflow)."""

    enabled: bool = flag(True, help="record runs in MLflow")
    uri: str | None = anything(None, help="null = sqlite:///<launch dir>/mlflow.db")
    experiment: str = text("gpdlm", help="MLflow experiment name (at most 500 characters)")
    run_name: str | None = anything(None, help="null = a name made of the run's settings")
    system_metrics: float | None = real(10.0, lo=0, null=True, help="seconds between system/* samples; null or 0 = off")
    loss_every: int = integer(
        1, lo=1, help="train_loss in the store: every k-th step's value and the last (1 = every step)"
    )


def _widths_ok(widths) -> bool:
    return (
        widths is not None
        and not isinstance(widths, (str, int, float))
        and len(widths) > 0
        and all(is_int(w) and w >= 1 for w in widths)
    )


@dataclass(frozen=True)
class FeaturesSpec:
    """The ``features`` group: the input map g in front of the kernel (none, or the paper's MLP)."""

    name: str = text("none", help="none | nn")
    widths: list = listing([], help="nn: output width of each layer; out_dim = last width")
    activation: str = text("relu", help="nn: relu | tanh")

    def check(self) -> None:
        from ..features import ACTIVATIONS, INPUT_MAPS

        if self.name not in INPUT_MAPS:
            raise param_error("name", "features", f"one of {', '.join(INPUT_MAPS)}", self.name)
        if self.name == "nn":
            if not _widths_ok(self.widths):
                raise param_error("widths", "features=nn", "a non-empty list of integers >= 1", self.widths)
            if self.activation not in ACTIVATIONS:
                raise param_error("activation", "features=nn", f"one of {', '.join(ACTIVATIONS)}", self.activation)

    @property
    def used(self) -> bool:
        """Whether an input map stands in front of the kernel (name other than none)."""
        return self.name != "none"


@dataclass(frozen=True)
class KernelSpec:
    """The ``kernel`` group: a stationary kernel (rbf, matern12/32/52: ``ard``, ``lengthscale``,
    ``outputscale``) or a finite feature map (linear: ``outputscale``, ``learn_outputscale``,
    ``normaliser``; rff: ``num_features``, ``form``, ``lengthscale``, ``outputscale``, ``ard``);
    a kernel registered with ``methods.kernels.register`` keeps its own keys in ``extra``. The
    kernel's builder (``methods.kernels``) checks the keys its kernel reads."""

    name: str = text("rbf", help="rbf | matern12 | matern32 | matern52 | linear | rff")
    ard: bool = flag(False, help="one lengthscale per input dimension")
    lengthscale: float = real(1.0, help="initial lengthscale")
    outputscale: float = real(1.0, help="initial outputscale")
    num_features: int = integer(0, help="rff: d, the number of random features (form=sincos: even)")
    form: str = text("sincos", help="rff: sincos | cos")
    learn_outputscale: bool = flag(False, help="linear: learn s as a kernel-group parameter")
    normaliser: str = text("width", help="linear: data | width")
    extra: dict = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return f"kernel={self.name}"


@dataclass(frozen=True)
class LikelihoodSpec:
    """The ``likelihood`` group: its name and (``options``) its constructor's keys."""

    name: str = text("gaussian", help="gaussian | probit | logit | poisson_exp | poisson_softplus")
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        from ..likelihoods import LIKELIHOODS

        if self.name not in LIKELIHOODS:
            raise param_error("name", "likelihood", f"one of {sorted(LIKELIHOODS)}", self.name)
        noise: Any = self.extra.get("noise_init")
        if "noise_init" in self.extra and (not is_number(noise) or noise <= 0):
            raise param_error("noise_init", f"likelihood={self.name}", "a float in (0, inf)", noise)

    @property
    def options(self) -> dict:
        return dict(self.extra)

    @property
    def task(self) -> str:
        from ..likelihoods import LIKELIHOODS

        return LIKELIHOODS[self.name].task


@dataclass(frozen=True)
class EstimatorSpec:
    """The ``estimator`` group: its name and (``options``) its constructor's keys, checked against the
    estimator's schema (``schema.options.ESTIMATOR_OPTIONS``: ``num_samples``, ``num_nodes``, ...)."""

    name: str = text("auto", help="auto | exact | quadrature | bmc | smooth_bmc | ups")
    extra: dict = field(default_factory=dict)

    def check(self) -> None:
        """The estimator's options against its schema (``schema.options``); an estimator without one
        (registered from code) checks its own."""
        from .options import ESTIMATOR_OPTIONS, check_options

        schema = ESTIMATOR_OPTIONS.get(self.name)
        if schema is not None:
            check_options(self.extra, schema, f"estimator={self.name}")

    @property
    def options(self) -> dict:
        return dict(self.extra)


@dataclass(frozen=True)
class ModelSpec:
    """The ``model`` group's keys every model has; a family's own keys are its subclass's fields
    (``Spec`` in its module), or ``extra`` for a family that declares none."""

    name: str = text("", help="the model (one conf/model/<name>.yaml each)")
    extra: dict = field(default_factory=dict)

    @property
    def owner(self) -> str:
        return f"model={self.name}"


@dataclass(frozen=True)
class InducingModelSpec(ModelSpec):
    """The keys of a model with M inducing inputs Z and a mean function (sparse families)."""

    num_inducing: int = integer(100, lo=1, help="M, the number of inducing points")
    inducing_init: str = choice(
        "kmeans",
        ("kmeans", "random"),
        allowed="'kmeans' or 'random'",
        help="kmeans | random (subset of the training inputs)",
    )
    learn_inducing: bool = flag(True, help="train Z")
    mean: str = choice(
        "auto",
        ("auto", "zero", "constant"),
        allowed="'auto', 'zero' or 'constant'",
        help="auto (zero; constant for classification) | zero | constant",
    )
    jitter: float = real(1e-6, lo=0, help="added to K_uu")


__all__ = [
    "BiasSpec",
    "InducingModelSpec",
    "DatasetSpec",
    "EstimatorSpec",
    "FeaturesSpec",
    "KernelSpec",
    "LikelihoodSpec",
    "ModelSpec",
    "ObjectiveSpec",
    "RunKeys",
    "SplitSpec",
    "SweepSpec",
    "TrackingSpec",
]
