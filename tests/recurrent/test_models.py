"""The recurrent feature maps and every model of the family through the builder and the trainer."""

from __future__ import annotations

import math
import re

import pytest
import torch

from gpdlm_cli import build
from gpdlm_cli.features.recurrent import FeatureMap, WindowLayout, _RecurrentLayer
from gpdlm_cli.methods import recurrent
from gpdlm_cli.prepare import prepare
from gpdlm_cli.run.train import evaluator
from gpdlm_cli.training import run_stages

from ..conftest import compose


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_the_explicit_loop_is_torchs_cell(kind):
    """The loop that applies recurrent dropout computes torch's LSTM/GRU/RNN exactly (mask = 1)."""
    torch.manual_seed(0)
    layer = _RecurrentLayer(kind, 3, 5).double()
    seq = torch.randn(4, 7, 3, dtype=torch.float64)
    fused = layer(seq, None)
    loop = layer(seq, torch.ones(4, 5, dtype=torch.float64))
    torch.testing.assert_close(loop, fused, rtol=0, atol=1e-12)


@pytest.mark.parametrize("kind", ["lstm", "gru", "rnn"])
def test_per_gate_input_masks_of_ones_are_torchs_cell_and_each_gate_sees_its_own(kind):
    """The per-gate input path with all-one masks computes torch's cell exactly; zeroing the input of one
    gate changes the output only through that gate (here: differs from zeroing the whole input)."""
    torch.manual_seed(0)
    layer = _RecurrentLayer(kind, 3, 5).double()
    seq = torch.randn(4, 7, 3, dtype=torch.float64)
    G = {"lstm": 4, "gru": 3, "rnn": 1}[kind]
    ones = torch.ones(4, G, 3, dtype=torch.float64)
    torch.testing.assert_close(layer(seq, None, ones), layer(seq, None), rtol=0, atol=1e-12)
    torch.testing.assert_close(
        layer(seq, torch.ones(4, 5, dtype=torch.float64), ones), layer(seq, None), rtol=0, atol=1e-12
    )
    blank_all = layer(seq * 0, None)
    torch.testing.assert_close(layer(seq, None, ones * 0), blank_all, rtol=0, atol=1e-12)
    if G > 1:
        one_gate = ones.clone()
        one_gate[:, 0] = 0
        assert (layer(seq, None, one_gate) - blank_all).abs().max() > 1e-3


def _numpy_lstm(seq, w_ih, w_hh, b_ih, b_hh, rec_mask, in_mask):
    """A dense reference of one LSTM layer under per-sequence dropout masks, one sequence and step at a time:
    gate g (torch order i, f, g, o) sees W_ih[g] (x_t * in_mask[g]) + b_ih[g] + W_hh[g] (h * rec_mask) + b_hh[g]."""
    import numpy as np

    N, T, _ = seq.shape
    H = w_hh.shape[1]
    out = np.zeros((N, T, H))
    sig = lambda v: 1 / (1 + np.exp(-v))  # noqa: E731
    for n in range(N):
        h, c = np.zeros(H), np.zeros(H)
        for t in range(T):
            pre = [
                w_ih[g * H : (g + 1) * H] @ (seq[n, t] * in_mask[n, g])
                + b_ih[g * H : (g + 1) * H]
                + w_hh[g * H : (g + 1) * H] @ (h * rec_mask[n])
                + b_hh[g * H : (g + 1) * H]
                for g in range(4)
            ]
            c = sig(pre[1]) * c + sig(pre[0]) * np.tanh(pre[2])
            h = sig(pre[3]) * np.tanh(c)
            out[n, t] = h
    return out


def test_the_masked_lstm_loop_equals_a_dense_per_sequence_reference():
    """Random input (per gate) and recurrent masks: the loop (its gates reordered, biases joined, one product
    per gate for the input side) equals the per-sequence, per-step equations, forward and gradient."""
    torch.manual_seed(1)
    layer = _RecurrentLayer("lstm", 3, 5).double()
    seq = torch.randn(6, 4, 3, dtype=torch.float64)
    rec = (torch.rand(6, 5) > 0.3).double() / 0.7
    inp = (torch.rand(6, 4, 3) > 0.3).double() / 0.7
    c = layer.cell
    args = [t.detach().numpy() for t in (seq, c.weight_ih_l0, c.weight_hh_l0, c.bias_ih_l0, c.bias_hh_l0, rec, inp)]
    want = torch.from_numpy(_numpy_lstm(*args))
    got = layer(seq, rec, inp)
    torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    assert (got - layer(seq, None)).abs().max() > 1e-2  # the masks matter
    # the gradient in the weights: against central differences of the reference in one weight entry
    got.sum().backward()
    eps = 1e-6
    for name, idx in [("weight_hh_l0", (7, 2)), ("weight_ih_l0", (13, 1)), ("bias_hh_l0", (17,))]:
        w = getattr(c, name).detach().numpy().copy()
        k = ["weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0"].index(name) + 1
        hi, lo = list(args), list(args)
        hi[k], lo[k] = w.copy(), w.copy()
        hi[k][idx] += eps
        lo[k][idx] -= eps
        fd = (_numpy_lstm(*hi).sum() - _numpy_lstm(*lo).sum()) / (2 * eps)
        assert float(getattr(c, name).grad[idx]) == pytest.approx(fd, rel=1e-6, abs=1e-8)


def test_input_dropout_does_not_blank_whole_single_channel_windows():
    """Issue 40: with p = 0.25 on a single-channel LSTM input (Actuator regression), one input mask shared by
    all gates zeroed the whole window in 25% of the windows (their embeddings all equal the all-zero
    window's); per-gate masks blank a window only if all 4 gate masks are zero: p^4 = 0.4%."""
    layout = WindowLayout.from_names([f"u[t-{k}]" for k in range(8)])
    torch.manual_seed(0)
    net = FeatureMap("lstm", layout, 8, units=6, layers=1, out_dim=2, dropout=0.25).double()
    n = 4000
    x = torch.randn(n, 8, dtype=torch.float64)
    masks = net.draw_masks(n, torch.Generator().manual_seed(3))
    assert masks["input"][0].shape == (n, 4, 1)
    with torch.no_grad():
        h = net.hidden(x, masks=masks)
        h0 = net.hidden(torch.zeros_like(x), masks=masks)
    blank = float(((h - h0).abs().amax(1) == 0).double().mean())
    assert blank < 0.01  # shared mask: 0.25
    assert blank == pytest.approx(0.25**4, abs=0.003)


def test_dropout_masks_are_per_sequence_seeded_and_off_for_predictions():
    layout = WindowLayout.from_names([f"u[t-{k}]" for k in range(6)])
    torch.manual_seed(0)
    net = FeatureMap("lstm", layout, 6, units=8, layers=2, out_dim=2, dropout=0.3, rec_dropout=0.3).double()
    x = torch.randn(5, 6, dtype=torch.float64)
    a = net(x, train=True, generator=torch.Generator().manual_seed(1))
    b = net(x, train=True, generator=torch.Generator().manual_seed(1))
    c = net(x, train=True, generator=torch.Generator().manual_seed(2))
    torch.testing.assert_close(a, b)  # the generator fixes the masks
    assert not torch.allclose(a, c)
    plain = FeatureMap("lstm", layout, 6, units=8, layers=2, out_dim=2).double()
    plain.load_state_dict(net.state_dict())
    torch.testing.assert_close(net(x), plain(x), rtol=0, atol=0)  # no dropout when predicting


GP = re.compile(r"model=gp_")


#: a tiny free-simulation run of the sysid generator (fit() and the standardised-RMSE test)
TINY_FREE_SIMULATION = [
    "dataset=sysid_actuator",
    "dataset.n=160",
    "dataset.mode=free_simulation",
    "dataset.lag=5",
    "model.network.units=4",
    "trainer.max_iters=null",
    "trainer.max_epochs=2",
    "trainer.batch_size=32",
    "trainer.eval_every=0",
    "model.horizons=[1,5]",
    "progress=false",
    "tracking.enabled=false",
]


def fit(overrides, stages=None):
    cfg = compose(
        [
            *TINY_FREE_SIMULATION,
            *overrides,
        ]
        # the GP models' protocol keys (the network baselines have none)
        + (["model.training.theta_steps=2", "model.training.final_theta_steps=3"] if GP.search(str(overrides)) else [])
    )
    prepared = prepare(cfg)
    splits, data, method, settings = prepared.splits, prepared.data, prepared.method, prepared.settings
    chosen = method.stages if stages is None else [s for s in method.stages if s.name in stages]
    run_stages(chosen, data.x_train, data.y_train, settings, generator=torch.Generator().manual_seed(0))
    return method, evaluator(method, data, splits.y_std)()


@pytest.mark.parametrize("model", recurrent.MODELS)
def test_every_model_trains_and_predicts(model):
    extra = {
        "gp_gru": ["model.training.algorithm=delayed", "trainer.batch_size=16"],
        "gp_rnn": ["model.training.algorithm=alternating", "trainer.batch_size=16"],
        "gp_narx": ["model.gp.inference=kiss", "model.gp.grid_size=16"],
    }.get(model, [])
    extra += ["model.network.rec_dropout=0.1", "model.network.dropout=0.1"] if model in ("rnn", "gp_rnn") else []
    method, m = fit([f"model={model}", *extra])
    for key in ("val_rmse", "test_rmse", "test_nll", "test_sim_rmse", "test_sim_rmse_h5", "test_sim_nll"):
        assert math.isfinite(m[key]), (model, key, m)
    assert m["test_sim_rmse_h1"] == pytest.approx(m["test_rmse"], rel=1e-6)  # one step ahead = one-step prediction
    assert ("train_nlml" in m) == model.startswith("gp_")
    if model in ("gp_gru", "gp_rnn"):  # a refresh before the first step, then after every epoch / every step
        refresh = next(s for s in method.stages if s.name in ("delayed", "alternating")).hooks[1]
        steps = 2 * (refresh.n // 16)
        assert steps > 2 and refresh.refreshes == 1 + (steps if model == "gp_rnn" else 2)


def test_pretraining_trains_the_network_body_for_the_gp():
    """init=pretrained: an MSE stage trains the body (and its own head) before the GP stages; the GP
    keeps that body and its fresh projection."""
    cfg = ["model=gp_lstm", "model.init=pretrained", "model.pretrain_epochs=3"]
    method, _ = fit(cfg, stages=())
    assert [s.name for s in method.stages] == ["pretrain", "full", "theta"]
    body0 = [p.detach().clone() for p in method.model.network.body.parameters()]
    head0 = method.model.network.head.weight.detach().clone()
    pre = method.stages[0]
    _, splits, data = build.load_data(
        compose(["dataset=sysid_actuator", "dataset.n=160", "dataset.mode=free_simulation", "dataset.lag=5"])
    )
    with torch.no_grad():
        before = float(pre.objective(data.x_train, data.y_train))
    method, _ = fit(cfg, stages=("pretrain",))
    with torch.no_grad():
        after = float(method.stages[0].objective(data.x_train, data.y_train))
    assert after < before
    assert any(not torch.equal(a, b) for a, b in zip(body0, method.model.network.body.parameters()))
    torch.testing.assert_close(method.model.network.head.weight, head0)  # the GP's projection is untouched


@pytest.mark.slow
def test_free_simulation_logs_its_rmse_on_standardised_targets():
    """``sim_rmse_norm`` (and ``sim_rmse_h<k>_norm``) are free simulation's RMSEs on the standardised targets:
    on a tiny run each is its target-unit RMSE divided by the training targets' sd (numpy, from the raw
    table's training rows), as ``rmse_norm`` is to ``rmse``; the target-unit metrics are the rollout's own
    errors (recomputed from ``predict``), i.e. unchanged."""
    import numpy as np

    cfg = compose([*TINY_FREE_SIMULATION, "model=lstm"])
    prepared = prepare(cfg)
    splits, data, method = prepared.splits, prepared.data, prepared.method
    run_stages(method.stages, data.x_train, data.y_train, prepared.settings, generator=torch.Generator().manual_seed(0))
    m = evaluator(method, data, splits.y_std)()
    sd = float(np.std(np.asarray(prepared.table.y, dtype=np.float64)[splits.indices["train"]]))
    assert sd != pytest.approx(1.0, abs=0.05)  # a real unit change, not the identity
    for prefix in ("val_", "test_"):
        for key in ("sim_rmse", "sim_rmse_h1", "sim_rmse_h5", "rmse"):
            assert m[f"{prefix}{key}"] / m[f"{prefix}{key}_norm"] == pytest.approx(sd, rel=1e-12, abs=0), prefix + key
    mu, _ = method.predict(data.x_test)
    err = (mu[:, 0].double() - data.y_test.double()).numpy()
    assert m["test_sim_rmse"] == pytest.approx(float(np.sqrt(np.mean(err**2))) * sd, rel=1e-10)
    assert m["test_sim_rmse_h1"] == pytest.approx(m["test_rmse"], rel=1e-6)
