"""CompactLBFGS (gpdlm_cli/training/lbfgs.py) is torch's LBFGS with the two-loop recursion in closed
form: the same iterates up to rounding, a torch LBFGS state continues where torch would, and the
history buffer wraps around like torch's list."""

from __future__ import annotations

import copy

import numpy as np
import pytest
import torch

from gpdlm_cli.training.lbfgs import CompactLBFGS


def _problem(seed: int, p: int = 30, n: int = 60):
    """0.5 mean((A tanh(theta) - b)^2) with singular values 1 ... 1e-2: not a quadratic, so the line
    search does real work, and L-BFGS needs tens of iterations."""
    rng = np.random.default_rng(seed)
    u, _ = np.linalg.qr(rng.normal(size=(n, p)))
    v, _ = np.linalg.qr(rng.normal(size=(p, p)))
    a = torch.tensor(u @ np.diag(np.logspace(0, -2, p)) @ v.T * np.sqrt(n))
    b = torch.tensor(rng.normal(size=n))
    return lambda theta: 0.5 * ((a @ torch.tanh(theta) - b) ** 2).mean()


def _iterates(cls, f, steps: int, history: int, start=None, state=None):
    theta = torch.nn.Parameter(torch.full((30,), 0.1, dtype=torch.float64) if start is None else start.clone())
    opt = cls(
        [theta],
        lr=1.0,
        max_iter=1,
        max_eval=26,
        history_size=history,
        line_search_fn="strong_wolfe",
        tolerance_change=0.0,
        tolerance_grad=0.0,
    )
    if state is not None:
        opt.load_state_dict(
            copy.deepcopy(state)
        )  # torch shares the tensors it loads (prev_flat_grad is updated in place)

    def closure():
        opt.zero_grad()
        value = f(theta)
        value.backward()
        return value

    out = []
    for _ in range(steps):
        opt.step(closure)
        out.append(theta.detach().clone())
    return torch.stack(out), opt, theta


@pytest.mark.parametrize("history", [100, 5])
def test_iterates_equal_torchs_lbfgs(history):
    """25 iterations (with history 5 the ring buffer wraps around 4 times): every iterate equal to
    torch's to 1e-9 (they differ only in the rounding of the recursion)."""
    f = _problem(0)
    ours, _, _ = _iterates(CompactLBFGS, f, 25, history)
    torchs, _, _ = _iterates(torch.optim.LBFGS, f, 25, history)
    assert float(f(torchs[-1])) < 0.7 * float(f(torch.full((30,), 0.1, dtype=torch.float64)))  # it moved
    np.testing.assert_allclose(ours.numpy(), torchs.numpy(), rtol=0, atol=1e-9)


def test_direction_is_the_two_loop_recursions():
    """With 7 stored pairs of random curvature, -H g of the closed form equals the textbook two-loop
    recursion computed in numpy, to 1e-12 relative."""
    rng = np.random.default_rng(3)
    p, k = 40, 7
    s_list = [rng.normal(size=p) for _ in range(k)]
    y_list = [s + 0.3 * rng.normal(size=p) for s in s_list]  # y^T s > 0
    g = rng.normal(size=p)
    gamma = float(y_list[-1] @ s_list[-1] / (y_list[-1] @ y_list[-1]))
    q, al = -g.copy(), [0.0] * k
    for i in reversed(range(k)):
        al[i] = (s_list[i] @ q) / (y_list[i] @ s_list[i])
        q -= al[i] * y_list[i]
    r = gamma * q
    for i in range(k):
        be = (y_list[i] @ r) / (y_list[i] @ s_list[i])
        r += (al[i] - be) * s_list[i]
    theta = torch.nn.Parameter(torch.zeros(p, dtype=torch.float64))
    opt = CompactLBFGS([theta], history_size=10)
    state = opt._history({}, theta.detach())
    for s, y in zip(s_list, y_list):
        CompactLBFGS._push(state, torch.tensor(s), torch.tensor(y), float(y @ s))
    d = CompactLBFGS._direction(state, torch.tensor(g), gamma).numpy()
    np.testing.assert_allclose(d, r, rtol=1e-12, atol=1e-12 * np.abs(r).max())


def test_continues_a_torch_lbfgs_state():
    """A checkpoint written by torch's LBFGS (lists of pairs) loads into CompactLBFGS, which then takes
    the steps torch would have taken (to 1e-9)."""
    f = _problem(1)
    _, opt, theta = _iterates(torch.optim.LBFGS, f, 12, 100)
    state, at = opt.state_dict(), theta.detach().clone()
    cont_ours, _, _ = _iterates(CompactLBFGS, f, 8, 100, start=at, state=state)
    cont_torch, _, _ = _iterates(torch.optim.LBFGS, f, 8, 100, start=at, state=opt.state_dict())
    full, _, _ = _iterates(torch.optim.LBFGS, f, 20, 100)
    np.testing.assert_allclose(cont_torch.numpy(), full[12:].numpy(), rtol=0, atol=1e-12)  # the reference continues
    np.testing.assert_allclose(cont_ours.numpy(), cont_torch.numpy(), rtol=0, atol=1e-9)


def test_state_dict_round_trip_continues_exactly():
    """Its own state (ring buffer, products, order) survives state_dict/load_state_dict: 6 + 6 steps
    through a reload are bit-identical to 12 straight."""
    f = _problem(2)
    straight, _, _ = _iterates(CompactLBFGS, f, 12, 4)
    first, opt, theta = _iterates(CompactLBFGS, f, 6, 4)
    second, _, _ = _iterates(CompactLBFGS, f, 6, 4, start=theta.detach(), state=opt.state_dict())
    assert torch.equal(torch.cat([first, second]), straight)


def test_free_entries_give_the_iterates_of_the_whole_vector():
    """A lower-triangular factor used through ``.tril()`` (q(u)'s covariance factor): with
    ``free_entries`` marking its lower triangle, the flat vector holds only those entries (the buffer
    shrinks) and every iterate equals the one L-BFGS takes on the whole matrix, to 1e-9; the upper
    triangle keeps its values. (Rounding: sums without the zeros, 1e-12 after 15 iterations.)"""
    rng = np.random.default_rng(3)
    n = 6
    target = torch.tensor(rng.normal(size=(n, n)))
    w = torch.tensor(rng.normal(size=n))

    def run(mask: bool):
        L = torch.nn.Parameter(
            torch.eye(n, dtype=torch.float64) + torch.triu(torch.full((n, n), 0.5, dtype=torch.float64), 1)
        )
        v = torch.nn.Parameter(torch.zeros(n, dtype=torch.float64))
        if mask:
            L.free_entries = torch.ones(n, n, dtype=torch.bool).tril()
        opt = CompactLBFGS(
            [v, L],
            lr=1.0,
            max_iter=1,
            max_eval=26,
            history_size=10,
            line_search_fn="strong_wolfe",
            tolerance_change=0.0,
            tolerance_grad=0.0,
        )

        def closure():
            opt.zero_grad()
            Lt = L.tril()
            value = ((Lt @ Lt.T - target @ target.T / n) ** 2).sum() + ((Lt @ torch.tanh(v) - w) ** 2).sum()
            value.backward()
            return value

        out = []
        for _ in range(15):
            opt.step(closure)
            out.append(torch.cat([v.detach().clone(), L.detach().reshape(-1).clone()]))
        return torch.stack(out), opt, L

    masked, opt_m, L_m = run(True)
    whole, opt_w, _ = run(False)
    assert opt_m._numel() == n + n * (n + 1) // 2 and opt_w._numel() == n + n * n
    assert (masked[-1] - masked[0]).abs().max() > 0.1  # it moved
    np.testing.assert_allclose(masked.numpy(), whole.numpy(), rtol=0, atol=1e-9)
    torch.testing.assert_close(torch.triu(L_m.detach(), 1), torch.triu(torch.full((n, n), 0.5, dtype=torch.float64), 1))
    with pytest.raises(ValueError, match="free_entries"):
        bad = torch.nn.Parameter(torch.zeros(3, dtype=torch.float64))
        bad.free_entries = torch.ones(2, dtype=torch.bool)
        CompactLBFGS([bad])


def test_a_state_over_the_whole_vector_resumes_on_the_free_entries():
    """A checkpoint written before ``free_entries`` (its flat vectors over the whole matrix) loads into an
    optimiser over the lower triangle: the step restarts the curvature history from steepest descent
    (n_iter back to 1, buffer of the new size) and the objective falls; without the reset it would fail."""
    n = 5
    target = torch.tensor(np.random.default_rng(4).normal(size=(n, n)))

    def make(mask: bool):
        L = torch.nn.Parameter(torch.eye(n, dtype=torch.float64))
        if mask:
            L.free_entries = torch.ones(n, n, dtype=torch.bool).tril()
        opt = CompactLBFGS(
            [L], history_size=10, line_search_fn="strong_wolfe", max_iter=1, tolerance_change=0.0, tolerance_grad=0.0
        )

        def closure():
            opt.zero_grad()
            value = ((L.tril() @ L.tril().T - target @ target.T / n) ** 2).sum()
            value.backward()
            return value

        return L, opt, closure

    _, old, old_closure = make(False)
    for _ in range(4):
        old.step(old_closure)
    L, new, closure = make(True)
    new.load_state_dict(copy.deepcopy(old.state_dict()))
    before = float(closure())
    new.step(closure)
    state = new.state[L]
    assert state["n_iter"] == 1 and state["SY"].shape == (20, n * (n + 1) // 2)
    for _ in range(3):
        new.step(closure)
    assert float(closure()) < before
