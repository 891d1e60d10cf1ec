"""LoMETabModel and its training loop: values against hand-built references, not just shapes."""

from __future__ import annotations

import math

import pytest
import rtdl_num_embeddings as rtdl
import torch
import torch.nn.functional as F
from torch import nn

from ensemblize.tabular.model import LoMETabModel
from ensemblize.tabular.train import batch_order, member_loss, predict_members, train_model


def _data(n=64, n_num=3, cards=(2, 3), seed=0):
    g = torch.Generator().manual_seed(seed)
    x_num = torch.randn(n, n_num, generator=g)
    blocks = [F.one_hot(torch.randint(0, c, (n,), generator=g), c).float() for c in cards]
    return torch.cat([x_num, *blocks], dim=1)


def _model(**kw):
    x = _data()
    defaults = dict(
        n_num=3,
        cat_cardinalities=[2, 3],
        n_out=4,
        regression=False,
        members=5,
        layer="lome",
        n_blocks=2,
        d_block=16,
        dropout=0.0,
        embedding="piecewise",
        bins=rtdl.compute_bins(x[:, :3], n_bins=6),
        d_embedding=4,
        rank=2,
        init_scale=0.7,
    )
    defaults.update(kw)
    torch.manual_seed(0)
    return LoMETabModel(**defaults), x


def _hand_mlp(model: LoMETabModel, member: int, weights) -> nn.Sequential:
    """A plain MLP on the model's embedded input; ``weights[i] = (W (out, in), b (out,))`` per block."""
    layers: list[nn.Module] = []
    for w, b in weights:
        lin = nn.Linear(w.shape[1], w.shape[0])
        with torch.no_grad():
            lin.weight.copy_(w)
            lin.bias.copy_(b)
        layers += [lin, nn.ReLU()]
    head = nn.Linear(model.head.in_features, model.head.out_features)
    with torch.no_grad():
        head.weight.copy_(model.head.weight[member].T)
        head.bias.copy_(model.head.bias[member])
    return nn.Sequential(*layers, head)


def _blocks(model):
    return [m for m in model.backbone if not isinstance(m, (nn.ReLU, nn.Dropout))]


@pytest.mark.parametrize("embedding", ["piecewise", "linear", "none"])
def test_k1_plain_equals_hand_built_mlp_forward_and_backward(embedding):
    model, x = _model(layer="plain", members=1, embedding=embedding)
    ref = _hand_mlp(model, 0, [(lin.weight, lin.bias) for lin in _blocks(model)])
    out = model(x)  # (B, 1, C)
    assert out.shape == (64, 1, 4)
    e = model.embed(x).detach().requires_grad_(True)
    want = ref(e)
    torch.testing.assert_close(out[:, 0], want, rtol=1e-5, atol=1e-6)
    # backward: same gradient w.r.t. the first layer's weight
    out[:, 0].square().sum().backward()
    want.square().sum().backward()
    torch.testing.assert_close(_blocks(model)[0].weight.grad, ref[0].weight.grad, rtol=1e-4, atol=1e-6)


@pytest.mark.parametrize("layer", ["lome", "additive", "independent"])
def test_each_member_is_an_mlp_with_its_own_weights(layer):
    model, x = _model(layer=layer)
    out = model(x)  # (B, K, C)
    e = model.embed(x)
    for k in range(model.members):
        ws = []
        for lin in _blocks(model):
            if layer == "independent":
                ws.append((lin.weight[k].T, lin.bias[k]))
            else:
                ws.append((lin.member_weights()[k], lin.bias[k]))
        torch.testing.assert_close(out[:, k], _hand_mlp(model, k, ws)(e), rtol=1e-4, atol=1e-5)


def test_lome_member_weights_follow_the_equation():
    model, _ = _model(layer="lome")
    lin = _blocks(model)[1]
    k = 3
    want = lin.weight * (1 + lin.A[k] @ lin.B[k].T)
    torch.testing.assert_close(lin.member_weights()[k], want)


def test_shared_input_is_expanded_and_members_read_their_own_rows():
    model, x = _model(layer="lome")
    shared = model(x)
    torch.testing.assert_close(model(x[:, None].expand(-1, 5, -1)), shared)
    # per-member rows: member k of model(x3) only depends on x3[:, k]
    perm = torch.stack([torch.randperm(64, generator=torch.Generator().manual_seed(k)) for k in range(5)], 1)
    x3 = x[perm]  # (B, K, F)
    out3 = model(x3)
    for k in range(5):
        torch.testing.assert_close(out3[:, k], shared[perm[:, k], k], rtol=1e-5, atol=1e-6)


def test_regression_output_and_mean_convention():
    model, x = _model(n_out=1, regression=True, layer="independent")
    out = model(x)
    assert out.shape == (64, 5)
    torch.testing.assert_close(predict_members(model, x, batch_size=7), model.eval()(x).detach())


def test_piecewise_embedding_starts_linear_and_uses_bins():
    model, x = _model(layer="plain", members=1)
    emb = model.num_embedding
    assert isinstance(emb, rtdl.PiecewiseLinearEmbeddings)
    # version B: the piecewise part starts at zero, so the embedding is the linear one
    lin = emb.linear0
    torch.testing.assert_close(emb(x[:, :3]), x[:, :3, None] * lin.weight + lin.bias)


def test_bad_configuration_is_named():
    with pytest.raises(ValueError, match="'bogus'"):
        _model(layer="bogus")
    with pytest.raises(ValueError, match="'fourier'"):
        _model(embedding="fourier")
    with pytest.raises(ValueError, match="one bin tensor per numeric feature"):
        _model(bins=None)
    with pytest.raises(ValueError, match="n_out=3"):
        _model(regression=True, n_out=3)
    model, x = _model()
    with pytest.raises(ValueError, match=r"\(64, 7\)"):
        model(x[:, :7])


# ------------------------------------------------------------------------------------------------
# training
# ------------------------------------------------------------------------------------------------
def test_member_loss_is_mean_of_member_losses():
    g = torch.Generator().manual_seed(1)
    z = torch.randn(10, 4, 3, generator=g)
    y = torch.randint(0, 3, (10,), generator=g)
    want = sum(F.cross_entropy(z[:, k], y) for k in range(4)) / 4
    torch.testing.assert_close(member_loss(z, y, regression=False), want)
    yk = torch.randint(0, 3, (10, 4), generator=g)
    want = sum(F.cross_entropy(z[:, k], yk[:, k]) for k in range(4)) / 4
    torch.testing.assert_close(member_loss(z, yk, regression=False), want)
    r = torch.randn(10, 4, generator=g)
    t = torch.randn(10, generator=g)
    want = sum(((r[:, k] - t) ** 2).mean() for k in range(4)) / 4
    torch.testing.assert_close(member_loss(r, t, regression=True), want)


def test_batch_order_per_member_columns_are_distinct_permutations():
    g = torch.Generator().manual_seed(0)
    order = batch_order(50, members=4, per_member=True, generator=g)
    assert order.shape == (50, 4)
    for k in range(4):
        assert torch.equal(order[:, k].sort().values, torch.arange(50))
    assert not torch.equal(order[:, 0], order[:, 1])
    shared = batch_order(50, members=4, per_member=False, generator=g)
    assert torch.equal(shared.sort().values, torch.arange(50))


def _breast_cancer():
    from sklearn.datasets import load_breast_cancer
    from sklearn.preprocessing import StandardScaler

    x, y = load_breast_cancer(return_X_y=True)
    g = torch.Generator().manual_seed(0)
    perm = torch.randperm(len(x), generator=g).numpy()
    x, y = x[perm], y[perm]
    xs = StandardScaler().fit(x[:350]).transform(x).astype("float32")
    t = torch.from_numpy(xs)
    yt = torch.from_numpy(y).long()
    return (t[:350], yt[:350]), (t[350:450], yt[350:450]), (t[450:], yt[450:])


@pytest.mark.parametrize("per_member", [False, True])
def test_training_reduces_loss_beats_constant_and_is_deterministic(per_member):
    (xtr, ytr), (xva, yva), (xte, yte) = _breast_cancer()

    def run():
        torch.manual_seed(0)
        m = LoMETabModel(
            n_num=30, n_out=2, regression=False, members=4, layer="lome", n_blocks=2,
            d_block=32, dropout=0.1, embedding="none", rank=2, init_scale=0.5,
        )  # fmt: skip
        res = train_model(
            m, xtr, ytr, xva, yva, regression=False, members=4, max_epochs=12, patience=4,
            batch_size=64, per_member_batches=per_member, seed=0,
        )  # fmt: skip
        return m, res

    m, res = run()
    h = res.history
    assert h[-1]["train_loss"] < 0.5 * h[0]["train_loss"]
    assert {"val_accuracy", "val_loss", "val_pairwise_kl", "val_disagreement"} <= set(h[0])
    assert all(r["val_pairwise_kl"] >= 0 and 0 <= r["val_disagreement"] <= 1 for r in h)
    p = torch.softmax(predict_members(m, xte), -1).mean(1)
    acc = float((p.argmax(-1) == yte).float().mean())
    majority = max(float(yte.float().mean()), 1 - float(yte.float().mean()))
    assert acc > majority + 0.2 and acc > 0.9
    # restore-best: the restored model scores the best epoch's validation accuracy
    pv = torch.softmax(predict_members(m, xva), -1).mean(1)
    assert float((pv.argmax(-1) == yva).double().mean()) == pytest.approx(res.best_score)
    assert res.best_score == max(r["val_accuracy"] for r in h)
    m2, res2 = run()
    assert [r["train_loss"] for r in res2.history] == [r["train_loss"] for r in h]
    for a, b in zip(m.state_dict().values(), m2.state_dict().values(), strict=True):
        assert torch.equal(a, b)


def test_regression_training_reports_ambiguity_and_beats_mean():
    from sklearn.datasets import load_diabetes

    x, y = load_diabetes(return_X_y=True)
    x = torch.tensor(x, dtype=torch.float32)
    x = (x - x[:300].mean(0)) / x[:300].std(0)
    y = torch.tensor((y - y[:300].mean()) / y[:300].std(), dtype=torch.float32)
    torch.manual_seed(0)
    m = LoMETabModel(
        n_num=10, n_out=1, regression=True, members=4, layer="lome", n_blocks=2, d_block=32,
        dropout=0.1, embedding="none",
    )  # fmt: skip
    res = train_model(
        m, x[:300], y[:300], x[300:370], y[300:370], regression=True, members=4, max_epochs=15,
        patience=5, batch_size=64, seed=0,
    )  # fmt: skip
    assert all(r["val_ambiguity"] >= 0 for r in res.history)
    pred = predict_members(m, x[370:]).mean(1)
    rmse = math.sqrt(float(((pred - y[370:]) ** 2).mean()))
    const = math.sqrt(float(((y[:300].mean() - y[370:]) ** 2).mean()))
    assert rmse < 0.85 * const


def test_tabm_first_layer_signs_are_shared_within_each_feature_chunk():
    model, x = _model(layer="batchensemble", d_embedding=4)  # chunks: 3 numeric x 4, then 2 and 3
    first, second = _blocks(model)[:2]
    r = first.r.detach()  # (K, in)
    assert set(r.unique().tolist()) <= {-1.0, 1.0}
    for lo, hi in [(0, 4), (4, 8), (8, 12), (12, 14), (14, 17)]:
        assert torch.all(r[:, lo:hi] == r[:, lo : lo + 1])
    assert torch.all(second.r == 1) and torch.all(first.s == 1)
    out = model(x)
    e = model.embed(x)
    for k in range(model.members):
        ws = [(lin.member_weights()[k], lin.bias[k]) for lin in _blocks(model)]
        torch.testing.assert_close(out[:, k], _hand_mlp(model, k, ws)(e), rtol=1e-4, atol=1e-5)
