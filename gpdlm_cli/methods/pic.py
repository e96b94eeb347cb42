"""The PIC family: ``pic``, the partially independent conditional approximation (Snelson &
Ghahramani, 2007) with a variational q(u), trained stochastically over the k-means blocks -- the
PIC++ baseline of the sVBSSGP paper's Table 1 (Hoang, Hoang & Low, ICML 2015; docs/sparse_spectrum.md).

The blocks (``model.blocks``; the sVBSSGP paper does not say how its PIC++ partitioned, so all three are
gpdlm's choices):

* ``kmeans`` (default): the ``model.partitions`` k-means cells of the training inputs
  (``models.LocalCells``, the very cells sVBSSGP predicts on, same seed); a test point is predicted
  from its nearest centroid's block;
* ``kmeans_independent``: k-means cells of their own (another k-means seed): local, not shared;
* ``random``: a fixed random partition into p blocks of equal size (drawn from the seed); a test point
  joins a block drawn at random. Issue 40: on the AIMPEAK-like generator PIC++'s gain is all in its
  local exact GP on the k-means cell (3.07 km/h); with random blocks the same hyperparameters give 11.70.

Each step takes one block, each epoch visits every
non-empty block once in a random order, and minimises the unbiased estimate -(p F_k - KL) / n of the
negative PIC bound per datum (``models.pic``). A test point is predicted from its nearest centroid's
block and the inducing inputs (PIC's predictive). Gaussian regression; stationary kernels.

Parameter groups: ``variational`` (the whitened mean and Cholesky factor of q(u)), ``inducing``
(Z), ``kernel`` (kernel hyperparameters), ``likelihood`` (the noise). Adam's lr defaults to 1e-2
here (when ``trainer.lr`` is null). Monitor: ``bound_per_datum`` (L(q) / n on all blocks).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..exceptions import UnsupportedCombination, param_error
from ..schema import InducingModelSpec, RunSpec, as_run_spec
from ..schema.keys import choice, integer, real
from . import components as C
from .base import Method, Stage

MODELS = ("pic",)
USES_BETA = False  # objective.beta is not read: a beta sweep repeats one run (sweep/beta_free.py)
PREDICTS_FROM_TRAINING_DATA = True
TAKES_FEATURES = False  # declarations: base.DECLARATIONS (the others keep their defaults)

#: PIC's default Adam learning rate (when trainer.lr is null)
PIC_LR = 1e-2
BLOCKS = ("kmeans", "kmeans_independent", "random")
_INDEPENDENT_SEED = 1_000_003  # kmeans_independent: k-means seed = seed + this


class RandomBlocks:
    """A fixed random partition of n training rows into ``num_blocks`` blocks of equal size (+-1),
    drawn from ``seed``; ``assign(x)`` puts each query row into a block drawn uniformly at random (the
    same draw for the same number of rows: a fresh generator from the seed on every call). The
    interface of ``models.LocalCells`` (``members``, ``sizes``, ``assign``)."""

    def __init__(self, n: int, num_blocks: int, seed: int, device=None):
        import torch

        gen = torch.Generator().manual_seed(int(seed))
        labels = torch.randperm(n, generator=gen) % num_blocks
        self.num_blocks, self.seed = num_blocks, int(seed)
        self.sizes = torch.bincount(labels, minlength=num_blocks)
        order = torch.argsort(labels, stable=True)
        self.members = [m.to(device) for m in torch.split(order, self.sizes.tolist())]

    def assign(self, x):
        import torch

        gen = torch.Generator().manual_seed(self.seed + 1)
        return torch.randint(0, self.num_blocks, (x.shape[0],), generator=gen).to(x.device)


@dataclass(frozen=True)
class Spec(InducingModelSpec):
    """``model=pic``'s keys: the inducing points', the blocks, the jitter."""

    partitions: int = integer(200, lo=1, help="p: PIC's blocks (training and prediction)")
    blocks: str = choice("kmeans", BLOCKS, help="kmeans: sVBSSGP's k-means cells | kmeans_independent | random")
    jitter: float = real(1e-6, lo=0, help="added to K_uu")


def validate(spec: RunSpec) -> None:
    spec = as_run_spec(spec, Spec)
    C.gaussian_only(spec)
    C.no_feature_map(spec)
    if spec.trainer.batch_size is not None:
        raise UnsupportedCombination(
            "model=pic trains on its blocks (model.partitions, model.blocks); set trainer.batch_size=null"
        )


def check_sizes(spec: RunSpec, n_train: int) -> None:
    m = as_run_spec(spec, Spec).model
    C.check_inducing(m, n_train)
    if m.partitions > n_train:
        raise param_error("partitions", "model=pic", f"an integer in [1, n_train={n_train}]", m.partitions)


def build(spec: RunSpec, data, task: str) -> Method:
    import torch

    from ..models import LocalCells
    from ..models.pic import PartiallyIndependentGP
    from ..objectives.pic import PICBlockBound

    spec = as_run_spec(spec, Spec)
    m = spec.model
    x, y = data.x_train, data.y_train
    n, D = x.shape
    check_sizes(spec, n)
    seed = int(spec.seed)
    likelihood = C.build_likelihood(spec.likelihood, y).to(device=x.device, dtype=x.dtype)
    kernel = C.build_kernel(spec.kernel, D)
    Z = C.initial_inducing_points(x, m.num_inducing, m.inducing_init, seed)
    blocks_kind = m.blocks
    cells: RandomBlocks | LocalCells
    if blocks_kind == "random":
        cells = RandomBlocks(n, m.partitions, seed, device=x.device)
    else:
        cells = LocalCells(x, m.partitions, seed + (_INDEPENDENT_SEED if blocks_kind == "kmeans_independent" else 0))
    model = PartiallyIndependentGP(Z, kernel, likelihood, learn_inducing=m.learn_inducing, jitter=m.jitter)
    model = model.to(device=x.device, dtype=x.dtype)
    model.set_train_data(x, y, cells.members, cells.assign)
    blocks = [b for b in cells.members if b.numel() > 0]

    lik_params = list(likelihood.parameters())
    variational = model.variational_parameters()
    taken = {id(p) for p in lik_params + variational} | {id(model.Z)}
    groups = {
        "variational": variational,
        "inducing": [model.Z],
        "kernel": [p for p in model.parameters() if id(p) not in taken],
        "likelihood": lik_params,
    }
    overrides = {"lr": PIC_LR} if spec.trainer.lr is None else {}
    stage = Stage(
        "pic", PICBlockBound(model, n, len(blocks)), groups, stochastic=True, overrides=overrides, blocks=blocks
    )

    def bound_per_datum() -> float:
        with torch.no_grad():
            return float(model.bound(x, y, blocks)) / n

    def diagnostics():
        scale = getattr(kernel, "outputscale", None)
        return {
            "noise_variance": float(likelihood.noise.detach()),
            **({"outputscale": float(scale.detach())} if scale is not None else {}),
            "blocks_per_epoch": len(blocks),
            "smallest_block": int(cells.sizes.min()),
            "largest_block": int(cells.sizes.max()),
        }

    tags = {"gpdlm.pic.iteration": f"epoch = {len(blocks)} block steps", "gpdlm.pic.blocks": blocks_kind}
    return Method(
        "pic",
        model,
        likelihood,
        [stage],
        monitors={"bound_per_datum": bound_per_datum},
        higher_is_better=frozenset({"bound_per_datum"}),
        diagnostics=diagnostics,
        tags=tags,
    )
