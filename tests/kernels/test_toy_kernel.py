"""A new kernel is one file (issue 46, item 2): this file alone registers a toy kernel -- the polynomial
kernel k(x, x') = s (1 + x.x' / c)^p -- with ``methods.kernels.register``, and every family that builds
its kernel through the one builder (``methods.kernels.build_kernel``) trains with it, its keys
checked before any data is read with the one-line error of every other key."""

from __future__ import annotations

import math

import gpytorch
import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.exceptions import ConfigError, param_error
from gpdlm_cli.methods import kernels
from gpdlm_cli.prepare import prepare

from ..conftest import compose, fast


class PolyKernel(gpytorch.kernels.Kernel):
    """k(x, x') = s (1 + x.x' / c)^p (p and c fixed, s learned)."""

    def __init__(self, degree: int, offset: float, scale: float):
        super().__init__()
        self.degree, self.offset = degree, offset
        self.register_parameter("raw_scale", torch.nn.Parameter(torch.tensor(math.log(scale))))

    def forward(self, x1, x2, diag=False, **params):
        s = self.raw_scale.exp()
        if diag:
            return s * (1 + (x1 * x2).sum(-1) / self.offset) ** self.degree
        return s * (1 + x1 @ x2.transpose(-1, -2) / self.offset) ** self.degree


def _check(spec) -> None:
    degree = spec.extra.get("degree", 2)
    if not isinstance(degree, int) or isinstance(degree, bool) or degree < 1:
        raise param_error("degree", spec.owner, "an integer >= 1", degree)


def _build(spec, num_dims, seed, inputs):
    return PolyKernel(int(spec.extra.get("degree", 2)), float(num_dims), float(spec.outputscale))


@pytest.fixture
def toy_kernel(monkeypatch):
    monkeypatch.setitem(kernels.KERNELS, "toy_poly", kernels.KernelKind(_build, _check))
    yield "toy_poly"


def test_a_registered_kernel_is_built_by_every_family_that_builds_kernels(toy_kernel):
    for model in ("sgpr", "svgp", "exact"):
        cfg = compose(fast([f"model={model}", "kernel.name=toy_poly", "+kernel.degree=3", "tracking.enabled=false"]))
        prepared = prepare(cfg)
        model_kernel = [m for m in prepared.method.model.modules() if isinstance(m, PolyKernel)]
        assert len(model_kernel) == 1, model
        k = model_kernel[0]
        assert k.degree == 3 and k.offset == prepared.data.x_train.shape[1]
        x = prepared.data.x_train[:5]
        want = (1 + x @ x.T / k.offset) ** 3  # s = kernel.outputscale = 1
        got = k(x, x).to_dense()
        torch.testing.assert_close(got, want)


def test_a_registered_kernel_trains(toy_kernel, tmp_path):
    from gpdlm_cli.run.train import run_train

    cfg = compose(fast(["model=sgpr", "kernel.name=toy_poly", "trainer.max_iters=5", "tracking.enabled=false"]))
    result = run_train(cfg, tmp_path)
    assert result is not None


def test_its_keys_are_checked_before_any_data_is_read(toy_kernel):
    cfg = compose(["model=sgpr", "kernel.name=toy_poly", "+kernel.degree=0"])
    with pytest.raises(ConfigError) as e:
        build.validate_config(cfg)
    assert str(e.value) == "the 'degree' parameter of kernel=toy_poly must be an integer >= 1; got 0 instead"


def test_an_unregistered_kernel_name_names_the_registered_ones():
    cfg = compose(["model=sgpr", "kernel.name=toy_poly"])
    with pytest.raises(ConfigError) as e:
        build.validate_config(cfg)
    assert str(e.value) == (
        "the 'name' parameter of kernel must be one of rbf, matern12, matern32, matern52, linear, rff; "
        "got 'toy_poly' instead"
    )
