"""L-BFGS whose direction costs a few matrix-vector products instead of ~4 h Python-level vector ops.

torch's ``LBFGS`` computes the quasi-Newton direction H g with the two-loop recursion (Nocedal, 1980)
as ~2 h dot products and ~2 h ``add_`` calls on the flat parameter vector, each a separate kernel
launch and a host read of a 0-d tensor: with h = 100 curvature pairs and ~7,800 parameters (joint DLM on
pol, M = 100) a step costs 5.2 ms against this class's 3.0 ms (``benchmarks/bench_training.py``, the
L-BFGS line), and in a real joint-DLM job the recursion took ~6 of every ~19 ms per iteration (cProfile,
n = 2,000). ``CompactLBFGS`` is the same optimiser -- torch's
state machine, strong-Wolfe line search (torch's ``_strong_wolfe``), step sizes, curvature test
(y^T s > 1e-10), initial scaling gamma = y^T s / y^T y and stopping tests -- with the recursion written
in closed form. With S, Y the stored pairs (oldest first), rho_i = 1 / (y_i^T s_i), R = [s_i^T y_j]
and q = -g, the first loop's coefficients a_i = rho_i s_i^T (q - sum_{j>i} a_j y_j) solve the unit upper
triangular system

    (I + diag(rho) triu(R, 1)) a = rho o (S q),

and, with r0 = gamma (q - Y^T a), the second loop's b_i = rho_i y_i^T (r0 + sum_{j<i} (a_j - b_j) s_j) the
unit lower triangular system

    (I + diag(rho) tril(R^T, -1)) b = rho o (Y r0 + tril(R^T, -1) a),

so H g = r0 + S^T (a - b): the same direction, up to rounding (tests compare the iterates with torch's
``LBFGS``). The pairs live in one 2h x p ring buffer [S; Y]; R and YY = [y_i^T y_j] (for Y r0 =
-gamma (Y g + YY a)) gain a row and a column per new pair, so an iteration reads the buffer twice ([S; Y]
[s, y, g] and [S; Y]^T c) in ~20 kernels, as torch's recursion does in ~4 h kernels.
"""

from __future__ import annotations

import torch
from torch.optim.lbfgs import _strong_wolfe


class CompactLBFGS(torch.optim.LBFGS):
    """``torch.optim.LBFGS`` with the closed-form two-loop recursion (module docstring); same
    constructor, one parameter group, line search ``None`` or ``"strong_wolfe"``.

    A parameter may carry ``free_entries``, a boolean mask of its shape: the entries the objective can
    move (a Cholesky factor used through ``.tril()``: its upper triangle has gradient 0 at every point).
    The flat vector -- the curvature pairs, the direction, the line search -- then holds only those
    entries; the others keep their values. L-BFGS never moves an entry whose gradient is always 0 (its
    components of g, s, y and so of every direction are 0), so the iterates are the same up to the
    rounding of sums without those zeros, and for q(u)'s covariance factor (M = 100: 4,950 of joint DLM's
    12,703 parameters) the ring buffer and every vector pass shrink by 39%."""

    def __init__(self, params, *args, **kwargs):
        super().__init__(params, *args, **kwargs)
        self._free_index = []
        for p in self._params:
            mask = getattr(p, "free_entries", None)
            if mask is not None and (mask.shape != p.shape or torch.is_complex(p)):
                raise ValueError(f"free_entries of shape {tuple(mask.shape)} for a parameter of shape {tuple(p.shape)}")
            self._free_index.append(None if mask is None else mask.reshape(-1).nonzero().squeeze(-1).to(p.device))

    # ----- the flat vector over the free entries -----------------------------------------------
    def _numel(self) -> int:
        if self._numel_cache is None:
            self._numel_cache = sum(
                p.numel() if idx is None else idx.numel() for p, idx in zip(self._params, self._free_index)
            )
        return self._numel_cache

    def _gather_flat_grad(self) -> torch.Tensor:
        if all(idx is None for idx in self._free_index):
            return super()._gather_flat_grad()
        views = []
        for p, idx in zip(self._params, self._free_index):
            n = p.numel() if idx is None else idx.numel()
            if p.grad is None:
                views.append(p.new_zeros(n))
            else:
                g = p.grad.to_dense() if p.grad.is_sparse else p.grad
                views.append(g.reshape(-1) if idx is None else g.reshape(-1).index_select(0, idx))
        return torch.cat(views, 0)

    def _add_grad(self, step_size, update) -> None:
        if all(idx is None for idx in self._free_index):
            return super()._add_grad(step_size, update)
        offset = 0
        for p, idx in zip(self._params, self._free_index):
            if idx is None:
                p.add_(update[offset : offset + p.numel()].view_as(p), alpha=step_size)
                offset += p.numel()
            else:
                p.view(-1).index_add_(0, idx, update[offset : offset + idx.numel()], alpha=step_size)
                offset += idx.numel()
        if offset != self._numel():
            raise AssertionError(f"Expected offset {offset} to equal {self._numel()}")

    # ----- the curvature pairs ----------------------------------------------------------------
    def _history(self, state: dict, like: torch.Tensor) -> dict:
        """The ring buffer SY = [S; Y] (2h x p: s_i in row i, y_i in row h + i), R = [s_i^T y_j], YY =
        [y_i^T y_j], rho, and ``order`` (the slots in use, oldest first)."""
        h, p = self.param_groups[0]["history_size"], like.numel()
        if state.get("SY") is None or state["SY"].shape != (2 * h, p):
            state.update(
                SY=like.new_zeros(2 * h, p),
                R=like.new_zeros(h, h),
                YY=like.new_zeros(h, h),
                rho=like.new_zeros(h),
                order=[],
            )
            for s, y in zip(state.pop("old_stps", None) or [], state.pop("old_dirs", None) or []):
                self._push(state, s, y, float(y.dot(s)))  # a checkpoint of torch's LBFGS: its pairs, in order
            state.pop("ro", None)
        return state

    @staticmethod
    def _push(state: dict, s: torch.Tensor, y: torch.Tensor, ys: float, g: torch.Tensor | None = None):
        """Store the pair (s, y) in the oldest slot; R and YY get their new row and column from one pass
        over the buffer ([S; Y] [s, y], and [S; Y] g in the same pass when ``g`` is given: returned)."""
        order, SY = state["order"], state["SY"]
        h = SY.shape[0] // 2
        slot = order.pop(0) if len(order) == h else len(order)
        SY[slot], SY[h + slot], state["rho"][slot] = s, y, 1.0 / ys
        P = SY @ torch.stack((s, y) if g is None else (s, y, g), -1)  # [S s, S y (, S g); Y s, Y y (, Y g)]
        state["R"][slot, :] = P[h:, 0]  # s_slot^T y_j
        state["R"][:, slot] = P[:h, 1]  # s_i^T y_slot
        state["YY"][slot, :] = P[h:, 1]
        state["YY"][:, slot] = P[h:, 1]
        order.append(slot)
        return None if g is None else P[:, 2]

    @staticmethod
    def _direction(state: dict, g: torch.Tensor, gamma: float, Hg: torch.Tensor | None = None) -> torch.Tensor:
        """-H g by the closed-form recursion (module docstring), in two passes over the buffer:
        [S; Y] g (``Hg``, if ``_push`` computed it), and [S; Y]^T [a - b; -gamma a] (Y r0 = -gamma (Y g +
        YY a) needs no pass of its own)."""
        order = state["order"]
        if not order:
            return g.neg().mul_(gamma)
        SY = state["SY"]
        h = SY.shape[0] // 2
        idx = torch.tensor(order, device=g.device)
        rho = state["rho"][idx]
        R = state["R"][idx][:, idx]
        eye = torch.eye(len(order), dtype=g.dtype, device=g.device)
        Hg = SY @ g if Hg is None else Hg
        Sg, Yg = Hg[:h][idx], Hg[h:][idx]
        upper = torch.triu(R, 1)
        a = torch.linalg.solve_triangular(
            eye + rho[:, None] * upper, (rho * Sg).neg().unsqueeze(-1), upper=True
        ).squeeze(-1)
        Yr0 = (Yg + state["YY"][idx][:, idx] @ a).mul_(-gamma)  # Y r0, r0 = gamma (-g - Y^T a)
        lower = torch.tril(R.T, -1)
        b = torch.linalg.solve_triangular(
            eye + rho[:, None] * lower, (rho * (Yr0 + lower @ a)).unsqueeze(-1), upper=False
        ).squeeze(-1)
        coef = g.new_zeros(2 * h)
        coef[idx] = a - b
        coef[h + idx] = -gamma * a
        return torch.addmv(g, SY.T, coef, beta=-gamma)  # r0 + S^T (a - b) = -gamma g + [S; Y]^T coef

    # ----- one step (torch's LBFGS.step with the direction above) ------------------------------
    def _forget_if_resized(self, state: dict, flat_grad: torch.Tensor) -> None:
        """A state saved over another flat vector (a checkpoint from before ``free_entries``): start the
        curvature history afresh from steepest descent instead of failing on the resume."""
        if state.get("prev_flat_grad") is not None and state["prev_flat_grad"].numel() != flat_grad.numel():
            for key in ("d", "t", "H_diag", "prev_flat_grad", "prev_loss", "SY"):
                state.pop(key, None)
            state["n_iter"] = 0

    def _next_direction(self, state: dict, flat_grad, prev_flat_grad, d, t, gamma: float):
        """``(d, gamma)``: steepest descent on the first iteration (the history cleared), else the
        curvature pair of the last move stored when y^T s > 1e-10 (gamma = y^T s / y^T y) and -H g."""
        if state["n_iter"] == 1:
            state["order"].clear()
            return flat_grad.neg(), 1.0
        y = flat_grad.sub(prev_flat_grad)
        s = d.mul(t)
        ys = float(y.dot(s))
        Hg = None
        if ys > 1e-10:
            Hg = self._push(state, s, y, ys, flat_grad)
            gamma = ys / float(y.dot(y))
        return self._direction(state, flat_grad, gamma, Hg), gamma

    def _move(self, closure, d, t: float, loss: float, flat_grad, gtd: float, max_ls: int, last: bool):
        """Move along ``d``: ``(loss, flat_grad, t, evaluations, converged)``. With the strong-Wolfe line
        search (at most ``max_ls`` evaluations), else a fixed step of ``t`` (evaluated unless ``last``)."""
        group = self.param_groups[0]
        line_search_fn, tolerance_grad = group["line_search_fn"], group["tolerance_grad"]
        if line_search_fn is not None:
            if line_search_fn != "strong_wolfe":
                raise RuntimeError("only 'strong_wolfe' is supported")
            x_init = self._clone_param()

            def obj_func(x, t, d):
                return self._directional_evaluate(closure, x, t, d)

            loss, flat_grad, t, ls_func_evals = _strong_wolfe(
                obj_func, x_init, t, d, loss, flat_grad, gtd, max_ls=max_ls
            )
            t = float(t)
            self._add_grad(t, d)
            return loss, flat_grad, t, ls_func_evals, flat_grad.abs().max() <= tolerance_grad
        self._add_grad(t, d)
        if last:
            return loss, flat_grad, t, 0, False
        with torch.enable_grad():
            loss = float(closure())
        flat_grad = self._gather_flat_grad()
        return loss, flat_grad, t, 1, flat_grad.abs().max() <= tolerance_grad

    @torch.no_grad()
    def step(self, closure):  # type: ignore[override]
        closure = torch.enable_grad()(closure)
        group = self.param_groups[0]
        lr, max_iter, max_eval = float(group["lr"]), group["max_iter"], group["max_eval"]
        tolerance_grad, tolerance_change = group["tolerance_grad"], group["tolerance_change"]
        state = self.state[self._params[0]]
        state.setdefault("func_evals", 0)
        state.setdefault("n_iter", 0)

        orig_loss = closure()
        loss = float(orig_loss)
        current_evals = 1
        state["func_evals"] += 1
        flat_grad = self._gather_flat_grad()
        if flat_grad.abs().max() <= tolerance_grad:
            return orig_loss
        self._forget_if_resized(state, flat_grad)
        self._history(state, flat_grad)
        d, t, gamma = state.get("d"), state.get("t"), float(state.get("H_diag", 1.0))
        prev_flat_grad, prev_loss = state.get("prev_flat_grad"), state.get("prev_loss")

        n_iter, opt_cond = 0, False
        while n_iter < max_iter:
            n_iter += 1
            state["n_iter"] += 1
            d, gamma = self._next_direction(state, flat_grad, prev_flat_grad, d, t, gamma)
            if prev_flat_grad is None:
                prev_flat_grad = flat_grad.clone(memory_format=torch.contiguous_format)
            else:
                prev_flat_grad.copy_(flat_grad)
            prev_loss = loss

            t = min(1.0, 1.0 / float(flat_grad.abs().sum())) * lr if state["n_iter"] == 1 else lr
            gtd = float(flat_grad.dot(d))
            if gtd > -tolerance_change:
                break
            loss, flat_grad, t, ls_func_evals, opt_cond = self._move(
                closure, d, t, loss, flat_grad, gtd, max_eval - current_evals, n_iter == max_iter
            )
            current_evals += ls_func_evals
            state["func_evals"] += ls_func_evals
            if n_iter == max_iter or current_evals >= max_eval or opt_cond:
                break
            if d.mul(t).abs().max() <= tolerance_change or abs(loss - prev_loss) < tolerance_change:
                break

        state.update(d=d, t=t, H_diag=gamma, prev_flat_grad=prev_flat_grad, prev_loss=prev_loss)
        return orig_loss


__all__ = ["CompactLBFGS"]
