"""PIC++'s stochastic objective: the PIC variational bound estimated from one block per step."""

from __future__ import annotations

from .base import Objective


class PICBlockBound(Objective):
    """The unbiased estimate of -L / n from one block (x_k, y_k) of a fixed partition of p blocks:

        -L~ / n = -[ p F_k - KL(q || p) ] / n,    E_k[p F_k] = sum_k F_k  (k uniform over the blocks),

    with F_k and L(q) = sum_k F_k - KL of ``models.pic.PartiallyIndependentGP`` (the PIC variational
    bound, equal to log p_PIC(y) at the optimal q). ``num_blocks`` = p (1 with the whole data as
    the one block: the deterministic bound)."""

    name = "pic"

    def __init__(self, model, num_data: int, num_blocks: int):
        super().__init__()
        self.model = model
        self.num_data = num_data
        self.num_blocks = num_blocks

    def forward(self, x, y):
        return -(self.num_blocks * self.model.block_term(x, y) - self.model.kl_divergence()) / self.num_data
