"""Recurrent feature maps phi_W over windows of a time series (GP-LSTM paper, Sec. 2-4, App. E).

A window x_bar = [x^{t-L+1}, ..., x^t] arrives as one flattened row of a sequence table (see
``gpdlm_cli.data.sequences``: blocks of channels, each tap ``col[t-k]``). :class:`WindowLayout`
gathers the row back into a chronological sequence (N, T, C); :class:`FeatureMap` maps it to
h = phi_W(x_bar) in R^E:

* ``lstm`` (Eq. 3 without peepholes, as the authors' Keras code), ``gru``, ``rnn`` (Eq. 2, tanh):
  the last hidden state of the top layer, then dropout and a linear projection to E;
* ``narx``: an MLP (ReLU) on the flattened window, then a linear projection to E.

Dropout follows App. E / Gal and Ghahramani (2016): ``dropout`` on the inputs of every recurrent
layer and ``rec_dropout`` on the recurrent state, each with *one mask per sequence* shared by all
time steps, plus ``dropout`` on the last hidden state (NARX: after every hidden layer). The input
masks are drawn *per gate* (LSTM 4, GRU 3, RNN 1; Gal and Ghahramani's untied variational LSTM, and
Keras 1's LSTM/GRU, the authors' framework, unless ``consume_less='gpu'``): with one mask shared by
all gates a single-channel window lost its whole input with probability p (25% of the Actuator
regression windows at p = 0.25, issue 40); with per-gate masks only p^4 (0.4%). The recurrent mask
is one per sequence, shared by the gates. Masks come
from an explicit ``torch.Generator``, or are given: :meth:`FeatureMap.draw_masks` draws one set per
window, which Algorithm 2 keeps for a whole refresh interval (its cotangents and batch Jacobians
then see the same network). With ``train=False`` and no masks (predictions) there is no dropout.
The network may run in float32 while the GP algebra runs in float64: ``FeatureMap`` casts its input
to its own dtype and returns its own dtype.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

CELLS = ("lstm", "gru", "rnn")
KINDS = CELLS + ("narx",)
_TAP = re.compile(r"^(?P<channel>.+)\[t-(?P<k>\d+)\]$")


@dataclass
class WindowLayout:
    """Where each (time step, channel) of a window sits in the flattened row.

    ``index[j, c]`` is the column of channel ``channels[c]`` at chronological step j (0 = oldest);
    ``feedback[o]`` lists (column, k) of the past values y_o[t-k] of output o (autoregressive
    windows only): the columns free simulation overwrites with the model's own predictions."""

    index: torch.Tensor  # (T, C) long
    channels: list[str]
    feedback: list[list[tuple[int, int]]]

    @property
    def steps(self) -> int:
        return int(self.index.shape[0])

    @classmethod
    def from_names(cls, names: list[str], targets: Sequence[str] = ()) -> WindowLayout:
        """Parse ``col[t-k]`` names. Inputs have taps k = 0, s, 2s, ...; past values (targets and
        other past channels) k = 1, 1 + s, ...: step j pairs the j-th oldest tap of each channel,
        i.e. u_{t-L+1+j} with y_{t-L+j} (gpdlm's window convention, current input included)."""
        taps: dict[str, list[tuple[int, int]]] = {}
        for col, name in enumerate(names):
            m = _TAP.match(str(name))
            if m is None:
                raise ValueError(f"column {name!r} is not a window tap 'channel[t-k]'")
            taps.setdefault(m["channel"], []).append((int(m["k"]), col))
        lengths = {len(v) for v in taps.values()}
        if len(lengths) != 1:
            raise ValueError(f"window channels have different numbers of taps: {sorted(lengths)}")
        channels = list(taps)
        index = torch.tensor([[col for _, col in sorted(taps[c], reverse=True)] for c in channels]).T.contiguous()
        feedback = [[(col, k) for k, col in sorted(taps.get(t, []))] for t in targets]
        return cls(index, channels, feedback)

    def sequences(self, x: torch.Tensor) -> torch.Tensor:
        """(N, D) flattened windows -> (N, T, C) in chronological order."""
        return x[:, self.index.to(x.device)]


def _mask(shape, p: float, like: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
    """Inverted-dropout mask: Bernoulli(1 - p) / (1 - p)."""
    keep = torch.empty(shape, dtype=like.dtype, device=like.device).bernoulli_(1.0 - p, generator=generator)
    return keep / (1.0 - p)


GATES = {"lstm": 4, "gru": 3, "rnn": 1}  # input-weight blocks of torch's cells (i, f, g, o / r, z, n / -)


class _RecurrentLayer(nn.Module):
    """One torch LSTM/GRU/RNN layer (its weights), run by torch when there is no dropout, else by an
    explicit loop with one recurrent mask (N, units) per sequence and per-gate input masks
    (N, gates, n_in) (same weights)."""

    def __init__(self, kind: str, n_in: int, units: int):
        super().__init__()
        self.kind = kind
        cls = {"lstm": nn.LSTM, "gru": nn.GRU, "rnn": nn.RNN}[kind]
        self.cell = cls(n_in, units, batch_first=True)

    def forward(
        self, seq: torch.Tensor, rec_mask: torch.Tensor | None, in_mask: torch.Tensor | None = None
    ) -> torch.Tensor:
        if rec_mask is None and in_mask is None:
            return self.cell(seq)[0]
        c = self.cell
        H, G = c.hidden_size, GATES[self.kind]
        w_ih, w_hh, b_ih, b_hh = c.weight_ih_l0, c.weight_hh_l0, c.bias_ih_l0, c.bias_hh_l0
        N, T, n_in = seq.shape
        if self.kind != "gru":  # b_hh joins the input side once (a GRU's b_hn sits inside r * (...))
            b_ih, b_hh = b_ih + b_hh, None
        if self.kind == "lstm":  # gate blocks (i, f, o, g): one sigmoid over 3H, one tanh over H per step
            order = torch.cat([torch.arange(0, 2 * H), torch.arange(3 * H, 4 * H), torch.arange(2 * H, 3 * H)])
            order = order.to(w_ih.device)
            w_ih, w_hh, b_ih = w_ih[order], w_hh[order], b_ih[order]
            if in_mask is not None:
                in_mask = in_mask[:, [0, 1, 3, 2]]
        steps = seq.transpose(0, 1)  # (T, N, n_in): each step's rows contiguous below
        if in_mask is None:
            xw = steps @ w_ih.T + b_ih  # (T, N, G*H)
        else:  # gate g sees seq * in_mask[:, g]: one product per gate, (G, T*N, n_in) x (G, n_in, H), bias fused
            masked = (steps[None] * in_mask.transpose(0, 1)[:, None]).reshape(G, T * N, n_in)
            xw = torch.baddbmm(b_ih.view(G, 1, H), masked, w_ih.view(G, H, n_in).transpose(1, 2))
            xw = xw.view(G, T, N, H).permute(1, 2, 0, 3).reshape(T, N, G * H)  # (T, N, G*H): one copy
        w_hh_t = w_hh.T
        h = seq.new_zeros(N, H)
        cell_state = torch.zeros_like(h)
        out = []
        for t in range(T):
            hm = h if rec_mask is None else h * rec_mask
            if self.kind == "lstm":
                gates = torch.addmm(xw[t], hm, w_hh_t)
                i, f, o = torch.sigmoid(gates[:, : 3 * H]).chunk(3, 1)
                cell_state = torch.addcmul(f * cell_state, i, torch.tanh(gates[:, 3 * H :]))
                h = o * torch.tanh(cell_state)
            elif self.kind == "gru":  # r, z, n
                gh = torch.addmm(b_hh, hm, w_hh_t)
                xr, xz, xn = xw[t].chunk(3, 1)
                hr, hz, hn = gh.chunk(3, 1)
                r, z = torch.sigmoid(xr + hr), torch.sigmoid(xz + hz)
                h = (1 - z) * torch.tanh(xn + r * hn) + z * h
            else:
                h = torch.tanh(torch.addmm(xw[t], hm, w_hh_t))
            out.append(h)
        return torch.stack(out, 1)


class FeatureMap(nn.Module):
    """phi_W: (N, D) flattened windows -> (N, out_dim).

    ``body`` computes the last hidden state (recurrent) or the last hidden layer (NARX); ``head``
    is the linear projection to ``out_dim`` (the GP's embedding, or a baseline's outputs). A
    pre-trained baseline's body is the GP model's body (``init=pretrained``)."""

    seq_index: torch.Tensor  # (T, C) gather index of the window's steps (a buffer; recurrent kinds)

    def __init__(
        self,
        kind: str,
        layout: WindowLayout | None,
        n_inputs: int,
        *,
        units: int,
        layers: int,
        out_dim: int,
        dropout: float = 0.0,
        rec_dropout: float = 0.0,
    ):
        super().__init__()
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}")
        self.kind, self.layout = kind, layout
        self.units = int(units)  # every hidden layer's width
        self.dropout, self.rec_dropout = float(dropout), float(rec_dropout)
        if kind == "narx":
            sizes = [n_inputs] + [units] * layers
            self.body = nn.ModuleList(nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:]))
        else:
            if layout is None:
                raise ValueError(f"kind={kind} needs the windows' layout (WindowLayout)")
            n_ch = layout.index.shape[1]
            self.body = nn.ModuleList(_RecurrentLayer(kind, n_ch if i == 0 else units, units) for i in range(layers))
            # the gather index follows the module to its device (no host-to-device copy per call)
            self.register_buffer("seq_index", layout.index.clone(), persistent=False)
        self.head = nn.Linear(units, out_dim)

    @property
    def dtype(self) -> torch.dtype:
        return self.head.weight.dtype

    @property
    def stochastic(self) -> bool:
        return self.dropout > 0 or self.rec_dropout > 0

    def draw_masks(
        self, n: int, generator: torch.Generator | None = None, *, device: torch.device | None = None
    ) -> dict[str, list[torch.Tensor | None]]:
        """One set of dropout masks for ``n`` windows (one per sequence, App. E), as ``hidden(train=True)``
        draws them (same order, same generator stream): ``input`` (per recurrent layer: (n, gates,
        channels), one mask per gate, or None), ``recurrent`` (per layer: (n, units) or None), ``output`` ((n, units) or None; NARX: one
        per hidden layer in ``input``)."""
        device = self.head.weight.device if device is None else device
        like = torch.empty(0, dtype=self.dtype, device=device)
        p, pr = self.dropout, self.rec_dropout
        masks: dict[str, list[torch.Tensor | None]] = {"input": [], "recurrent": [], "output": []}
        if self.kind == "narx":
            for layer in self.body:
                masks["input"].append(_mask((n, layer.out_features), p, like, generator) if p > 0 else None)
            return masks
        channels = self.seq_index.shape[1]
        for _ in self.body:
            masks["input"].append(_mask((n, GATES[self.kind], channels), p, like, generator) if p > 0 else None)
            masks["recurrent"].append(_mask((n, self.units), pr, like, generator) if pr > 0 else None)
            channels = self.units  # each layer's hidden size
        masks["output"].append(_mask((n, channels), p, like, generator) if p > 0 else None)
        return masks

    @staticmethod
    def select_masks(
        masks: dict[str, list[torch.Tensor | None]], index: torch.Tensor | None
    ) -> dict[str, list[torch.Tensor | None]]:
        """The masks of rows ``index`` (all rows if None)."""
        if index is None:
            return masks
        return {k: [None if m is None else m[index] for m in v] for k, v in masks.items()}

    def hidden(
        self,
        x: torch.Tensor,
        *,
        train: bool = False,
        generator: torch.Generator | None = None,
        masks: dict[str, list[torch.Tensor | None]] | None = None,
    ) -> torch.Tensor:
        """The body's output (before the projection), with dropout only if ``train`` (fresh masks from
        ``generator``) or ``masks`` (given ones, from :meth:`draw_masks`, one row per row of x)."""
        x = x.to(self.dtype)
        if masks is None and train and self.stochastic:
            masks = self.draw_masks(x.shape[0], generator, device=x.device)
        if masks is None:
            masks = {"input": [None] * len(self.body), "recurrent": [None] * len(self.body), "output": [None]}
        if self.kind == "narx":
            h = x
            for layer, m in zip(self.body, masks["input"]):
                h = torch.relu(layer(h))
                if m is not None:
                    h = h * m
            return h
        seq = x[:, self.seq_index]  # (N, T, C), chronological
        for layer, m_in, m_rec in zip(self.body, masks["input"], masks["recurrent"]):
            seq = layer(seq, m_rec, m_in)  # input masks per sequence and gate, shared over time
        h = seq[:, -1]
        if masks["output"][0] is not None:
            h = h * masks["output"][0]
        return h

    def forward(
        self,
        x: torch.Tensor,
        *,
        train: bool = False,
        generator: torch.Generator | None = None,
        masks: dict[str, list[torch.Tensor | None]] | None = None,
    ) -> torch.Tensor:
        return self.head(self.hidden(x, train=train, generator=generator, masks=masks))


__all__ = ["CELLS", "KINDS", "FeatureMap", "WindowLayout"]
