"""KISS-GP's training matrix W K_UU W^T on one set of points as a structure-aware linear operator (issue 41,
item 3).

gpytorch represents K_XX ~ W K_UU W^T (Wilson and Nickisch 2015) as an ``InterpolatedLinearOperator``
over a ``KroneckerProductLinearOperator`` of ``ToeplitzLinearOperator`` factors, with 4^E interpolation
weights per row into the flattened grid. Its matrix-vector products are fine, but the entries the
pivoted-Cholesky preconditioner reads -- n x rank of them in the forward pass and again, with their
graph, in the backward pass of every NLML -- go through the generic ``_get_indices`` of the three
operators: 4^E x 4^E Kronecker entries per matrix entry, each Toeplitz entry by ``fmod`` index
arithmetic, about half of a KISS refresh's time on the GP-LSTM car tasks (55% with the Python
bookkeeping around it).

:class:`FactoredKissOperator` represents the same matrix through its structure: the cubic weights are a
tensor product over the E dimensions and K_UU = K_0 (x) ... (x) K_{E-1} (the factors in interpolation
order, ``deep_kernel.GridInterpolationKernelInOrder``), so an entry is

    (W K_UU W^T)_ij = prod_d  w_{d,i}^T K_d w_{d,j}     (4 x 4 weights and a 4 x 4 block of K_d per d),

and a product W K_UU W^T V scatters V onto the grid (4^E weights per row), applies each dense K_d
along its grid axis (m_d^2 per grid line), and gathers back. Everything is plain differentiable torch:
linear_operator's default derivative (autograd through ``_matmul``) and the preconditioner's backward
(autograd through ``_get_indices``) need no operator-specific code. The matrix is the one gpytorch's
operator holds (tests/recurrent/test_kiss_operator.py: entries and products to 1e-12, NLML and its
gradients with the same seeded probes)."""

from __future__ import annotations

import warnings

import torch
from linear_operator.operators import LinearOperator


class FactoredKissOperator(LinearOperator):
    """W K_UU W^T (n x n) on points with per-dimension cubic-interpolation weights ``val`` (E, n, 4) and
    indices ``idx`` (E, n, 4) into the grid axes, and the dense Toeplitz factors ``factors`` (m_d x
    m_d) of K_UU in interpolation order (grid index row-major: dimension 0 slowest)."""

    def __init__(self, val: torch.Tensor, idx: torch.Tensor, *factors: torch.Tensor):
        super().__init__(val, idx, *factors)  # a float tensor first: linear_operator takes its dtype from it
        self.idx, self.val, self.factors = idx, val, factors
        self.sizes = tuple(int(f.shape[0]) for f in factors)
        self._csr = None
        self._diag = None

    def _size(self) -> torch.Size:
        n = self.idx.shape[1]
        return torch.Size((n, n))

    def _transpose_nonbatch(self) -> FactoredKissOperator:
        return self  # symmetric

    def _flat(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Indices into the flattened grid and weights of every row, (n, 4^E) each."""
        flat, weight = self.idx[0], self.val[0]
        for d in range(1, len(self.factors)):
            flat = (flat[:, :, None] * self.sizes[d] + self.idx[d][:, None, :]).reshape(flat.shape[0], -1)
            weight = (weight[:, :, None] * self.val[d][:, None, :]).reshape(weight.shape[0], -1)
        return flat, weight

    def _sparse(self) -> tuple[torch.Tensor, torch.Tensor]:
        """W (n x M) and W^T (M x n) as constant CSR matrices, built once per operator: the products
        inside CG and Lanczos (no graph) use them; a product that needs a graph uses the dense path."""
        if self._csr is None:
            flat, weight = self._flat()
            flat, weight = flat.detach(), weight.detach()
            n, c = flat.shape
            M = self._grid_points()
            key, values = flat.reshape(-1), weight.reshape(-1)
            order = torch.argsort(key, stable=True)
            crow = torch.zeros(M + 1, dtype=torch.long, device=key.device)
            crow[1:] = torch.bincount(key, minlength=M).cumsum(0)
            rows = torch.arange(n, device=key.device).repeat_interleave(c)
            with warnings.catch_warnings():  # "sparse CSR support is in beta": products only, on valid indices
                warnings.simplefilter("ignore", UserWarning)
                W = torch.sparse_csr_tensor(torch.arange(0, n * c + 1, c, device=key.device), key, values, size=(n, M))
                Wt = torch.sparse_csr_tensor(crow, rows[order], values[order], size=(M, n))
            self._csr = (W, Wt)
        return self._csr

    def _grid_points(self) -> int:
        M = 1
        for m in self.sizes:
            M *= m
        return M

    def _matmul(self, rhs: torch.Tensor) -> torch.Tensor:
        vector = rhs.ndim == 1
        v = rhs[:, None] if vector else rhs
        r = v.shape[1]
        graph = torch.is_grad_enabled() and (self.val.requires_grad or v.requires_grad)
        if graph:  # differentiable in the weights (and so in the points)
            flat, weight = self._flat()
            grid = v.new_zeros(self._grid_points(), r)
            grid = grid.index_add(0, flat.reshape(-1), (weight[:, :, None] * v[:, None, :]).reshape(-1, r))  # W^T v
        else:
            W, Wt = self._sparse()
            grid = Wt @ v
        grid = grid.reshape(*self.sizes, r)
        for d, K in enumerate(self.factors):  # K_UU = K_0 (x) ... (x) K_{E-1}: K_d along grid axis d
            grid = torch.movedim(torch.tensordot(K, grid, dims=([1], [d])), 0, d)
        grid = grid.reshape(-1, r)
        out = (weight[:, :, None] * grid[flat]).sum(1) if graph else W @ grid  # W (K_UU W^T v)
        return out[:, 0] if vector else out

    def _kron(self, factors, grid: torch.Tensor) -> torch.Tensor:
        """K_UU grid for grid values (M, r), K_UU = factors[0] (x) ... (x) factors[E-1]."""
        r = grid.shape[-1]
        grid = grid.reshape(*self.sizes, r)
        for d, K in enumerate(factors):
            grid = torch.movedim(torch.tensordot(K, grid, dims=([1], [d])), 0, d)
        return grid.reshape(-1, r)

    def _bilinear_derivative(self, left_vecs: torch.Tensor, right_vecs: torch.Tensor):
        """d/d(val, idx, factors) of sum_r u_r^T W K_UU W^T v_r, from the structure: with a = W^T U and
        b = W^T V (constant interpolation matrices), d/dK_d by autograd through the small per-axis products
        of a^T K_UU b, and d/dW_{ic} = U_i (K_UU b)_{flat_ic} + V_i (K_UU a)_{flat_ic} carried to the
        per-dimension weights by autograd through their product (linear_operator's default instead
        differentiates the whole product, scatter and gather included)."""
        U = left_vecs[:, None] if left_vecs.ndim == 1 else left_vecs
        V = right_vecs[:, None] if right_vecs.ndim == 1 else right_vecs
        W, Wt = self._sparse()
        a, b = Wt @ U, Wt @ V
        want_val = self.val.requires_grad
        want = [f.requires_grad for f in self.factors]
        grads_f: list[torch.Tensor | None] = [None] * len(self.factors)
        with torch.enable_grad():
            fk = [f.detach().requires_grad_(w) for f, w in zip(self.factors, want)]
            kb = self._kron(fk, b)
            if any(want):
                got = iter(torch.autograd.grad((a * kb).sum(), [f for f in fk if f.requires_grad]))
                grads_f = [next(got) if w else None for w in want]
            grad_val = None
            if want_val:
                flat, _ = self._flat()
                ka = self._kron([f.detach() for f in self.factors], a)
                gw = (U[:, None, :] * kb.detach()[flat]).sum(-1) + (V[:, None, :] * ka[flat]).sum(-1)  # (n, 4^E)
                val = self.val.detach().requires_grad_(True)
                weight = val[0]
                for d in range(1, len(self.factors)):
                    weight = (weight[:, :, None] * val[d][:, None, :]).reshape(weight.shape[0], -1)
                (grad_val,) = torch.autograd.grad(weight, val, gw)
        return (grad_val, None, *grads_f)

    def _get_indices(self, row_index, col_index, *batch_indices) -> torch.Tensor:
        if row_index.ndim == 2 and col_index.ndim == 2 and row_index.shape[1] == 1 and col_index.shape[0] == 1:
            # a rows x columns block (the preconditioner's rows: k x n in its forward pass, n x k in its
            # backward): A symmetric, the k columns A e_j are one product with k one-hot right-hand sides
            rows, cols = row_index[:, 0], col_index[0]
            few, many = (rows, cols) if rows.shape[0] <= cols.shape[0] else (cols, rows)
            onehot = self.val.new_zeros(self.idx.shape[1], few.shape[0])
            onehot[few, torch.arange(few.shape[0], device=few.device)] = 1.0
            block = self._matmul(onehot)[many]  # (len(many), len(few))
            return block.T if few is rows else block
        row_index, col_index = torch.broadcast_tensors(row_index, col_index)
        out = None
        for d, K in enumerate(self.factors):
            ii, vi = self.idx[d][row_index], self.val[d][row_index]  # (..., 4)
            jj, vj = self.idx[d][col_index], self.val[d][col_index]
            block = K[ii[..., :, None], jj[..., None, :]]  # (..., 4, 4)
            fd = (vi[..., :, None] * block * vj[..., None, :]).sum((-1, -2))
            out = fd if out is None else out * fd
        return out

    def _approx_diagonal(self) -> torch.Tensor:
        """The preconditioner's pivoting diagonal, as gpytorch's operator computes it: (W sqrt(diag K_UU))^2."""
        root = None
        for K in self.factors:  # diag K_UU = diag K_0 (x) ... (x) diag K_{E-1}
            dk = K.diagonal()
            root = dk if root is None else (root[:, None] * dk[None, :]).reshape(-1)
        flat, weight = self._flat()
        return (weight * root.sqrt()[flat]).sum(-1).pow(2)

    def _diagonal(self) -> torch.Tensor:
        if self._diag is None:  # asked several times per NLML (the preconditioner, its backward)
            rows = torch.arange(self.idx.shape[1], device=self.idx.device)
            self._diag = self._get_indices(rows, rows)
        return self._diag

    def _expand_batch(self, batch_shape):
        if len(batch_shape) == 0:
            return self
        raise NotImplementedError("FactoredKissOperator has no batch dimensions")


__all__ = ["FactoredKissOperator"]
