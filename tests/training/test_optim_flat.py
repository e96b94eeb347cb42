"""FlatAdadelta (training/optim.py): torch's AdaDelta on one flat buffer -- the same iterates and state."""

from __future__ import annotations

import torch

from gpdlm_cli.training.optim import FlatAdadelta, make_optimizer

SHAPES = [(16, 5), (16,), (16, 16), (16,), (1,), (16,)]


def _params(seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.nn.Parameter(torch.randn(s, dtype=torch.float64, generator=g)) for s in SHAPES]


def _groups(ps):
    return [{"params": ps[:4], "lr": 0.1}, {"params": ps[4:5], "lr": 0.3}, {"params": ps[5:], "lr": 1.0}]


def _run(opt, ps, steps, start=0, skip=None):
    for t in range(start, start + steps):
        for i, p in enumerate(ps):
            p.grad = None if (skip is not None and t % 7 == 0 and i == skip) else torch.sin(p.detach() * (t + 1))
        opt.step()


def test_flat_adadelta_equals_torch_over_300_steps():
    """Three groups at different learning rates, 300 steps: parameters and state equal torch's bit for bit; a
    step where one parameter has no gradient falls back to torch's step (that parameter stays put)."""
    ref_p, flat_p = _params(), _params()
    ref = make_optimizer("adadelta", _groups(ref_p), rho=0.9, flat=False)
    flat = make_optimizer("adadelta", _groups(flat_p), rho=0.9)
    assert type(flat) is FlatAdadelta and type(ref) is torch.optim.Adadelta
    _run(ref, ref_p, 300, skip=4)
    _run(flat, flat_p, 300, skip=4)
    for a, b in zip(ref_p, flat_p):
        assert torch.equal(a, b)
    sa, sb = ref.state_dict()["state"], flat.state_dict()["state"]
    for i in sa:
        for k in ("step", "square_avg", "acc_delta"):
            assert torch.equal(sa[i][k], sb[i][k]), (i, k)
    assert float(sa[4]["step"]) < 300 and float(sa[0]["step"]) == 300


def test_flat_adadelta_state_dict_round_trips_with_torch():
    """A checkpoint of either optimiser loads into the other and training goes on identically."""
    ref_p, flat_p = _params(), _params()
    ref = make_optimizer("adadelta", _groups(ref_p), flat=False)
    flat = make_optimizer("adadelta", _groups(flat_p))
    _run(ref, ref_p, 20)
    _run(flat, flat_p, 20)
    ref2_p, flat2_p = (
        [p.detach().clone().requires_grad_() for p in flat_p],
        [p.detach().clone().requires_grad_() for p in ref_p],
    )
    ref2 = make_optimizer("adadelta", _groups(ref2_p), flat=False)
    flat2 = make_optimizer("adadelta", _groups(flat2_p))
    ref2.load_state_dict(flat.state_dict())  # flat -> torch
    flat2.load_state_dict(ref.state_dict())  # torch -> flat
    _run(ref2, ref2_p, 30, start=20)
    _run(flat2, flat2_p, 30, start=20)
    _run(ref, ref_p, 30, start=20)
    for a, b, c in zip(ref_p, ref2_p, flat2_p):
        assert torch.equal(a, b) and torch.equal(a, c)
