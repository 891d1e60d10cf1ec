"""SelectiveNet heads: values against the equations written out, member features, width check."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ensemblize.selective import SelectiveNet, SelectiveOutput


def _net(in_dim=3, d=6, c=4, hidden=5, seed=0):
    torch.manual_seed(seed)
    return SelectiveNet(nn.Sequential(nn.Linear(in_dim, d), nn.Tanh()), d, c, hidden=hidden)


def _heads_by_hand(net: SelectiveNet, z: torch.Tensor, *, train: bool):
    """The three heads written out with plain tensor ops on (N, D) features."""
    f = z @ net.predictor.weight.T + net.predictor.bias
    h = z @ net.auxiliary.weight.T + net.auxiliary.bias
    lin1, _, bn, _, lin2 = net.selector
    a = torch.relu(z @ lin1.weight.T + lin1.bias)
    if train:
        mean, var = a.mean(0), a.var(0, unbiased=False)
    else:
        mean, var = bn.running_mean, bn.running_var
    a = (a - mean) / torch.sqrt(var + bn.eps) * bn.weight + bn.bias
    g = torch.sigmoid((a / 10) @ lin2.weight.T + lin2.bias).squeeze(-1)  # Keras reference: BN -> /10 -> Dense
    return f, g, h


@pytest.mark.parametrize("train", [True, False])
def test_heads_match_equations(train):
    net = _net()
    with torch.no_grad():  # non-trivial BN parameters and running statistics
        bn = net.selector[2]
        bn.weight.uniform_(0.5, 1.5)
        bn.bias.uniform_(-0.5, 0.5)
        bn.running_mean.uniform_(0, 1)
        bn.running_var.uniform_(0.5, 2)
    net.train(train)
    x = torch.randn(9, 3)
    out = net(x)
    assert isinstance(out, SelectiveOutput)
    z = net.features(x)
    f, g, h = _heads_by_hand(net, z, train=train)
    assert out.logits.shape == (9, 4) and out.selection.shape == (9,) and out.aux_logits.shape == (9, 4)
    torch.testing.assert_close(out.logits, f)
    torch.testing.assert_close(out.selection, g)
    torch.testing.assert_close(out.aux_logits, h)
    assert bool(((out.selection > 0) & (out.selection < 1)).all())
    # the tuple also unpacks
    logits, selection, aux = out
    assert logits is out.logits and selection is out.selection and aux is out.aux_logits


class _MemberFeatures(nn.Module):
    """(B, in) -> (B, M, D): M different linear maps, like a σN ensemble of a headless backbone."""

    def __init__(self, in_dim, d, m):
        super().__init__()
        self.w = nn.Parameter(torch.randn(m, in_dim, d) * 0.5)

    def forward(self, x):
        return torch.tanh(torch.einsum("bi,mid->bmd", x, self.w))


def test_member_features_eval_equals_per_member_heads():
    torch.manual_seed(1)
    feats = _MemberFeatures(3, 6, m=4)
    net = SelectiveNet(feats, 6, 5, hidden=7)
    net.train()
    net(torch.randn(32, 3))  # populate running statistics
    net.eval()
    x = torch.randn(8, 3)
    out = net(x)
    assert (
        out.logits.shape == (8, 4, 5) and out.selection.shape == (8, 4) and out.aux_logits.shape == (8, 4, 5)
    )
    z = feats(x)
    for m in range(4):  # reference: the same heads on each member's (B, D) features
        ref = net.heads(z[:, m])
        torch.testing.assert_close(out.logits[:, m], ref.logits)
        torch.testing.assert_close(out.selection[:, m], ref.selection)
        torch.testing.assert_close(out.aux_logits[:, m], ref.aux_logits)


def test_member_features_train_pools_batchnorm_over_all_rows_forward_and_backward():
    torch.manual_seed(2)
    feats = _MemberFeatures(3, 6, m=3)
    net = SelectiveNet(feats, 6, 4, hidden=5)
    x = torch.randn(10, 3)
    out = net(x)
    z = feats(x).detach().requires_grad_(True)
    f, g, h = _heads_by_hand(net, z.reshape(30, 6), train=True)  # BN over all B·M rows
    torch.testing.assert_close(out.logits, f.reshape(10, 3, 4))
    torch.testing.assert_close(out.selection, g.reshape(10, 3))
    torch.testing.assert_close(out.aux_logits, h.reshape(10, 3, 4))
    # backward: gradient w.r.t. the features through all heads matches the hand-written version
    w = torch.randn(10, 3)
    out2 = net.heads(z)
    (gz,) = torch.autograd.grad(
        (out2.selection * w).sum() + out2.logits.sum() + out2.aux_logits.pow(2).sum(), z
    )
    z2 = z.detach().requires_grad_(True)
    f2, g2, h2 = _heads_by_hand(net, z2.reshape(30, 6), train=True)
    (gz2,) = torch.autograd.grad((g2.reshape(10, 3) * w).sum() + f2.sum() + h2.pow(2).sum(), z2)
    torch.testing.assert_close(gz, gz2)


def test_feature_width_mismatch_names_both_widths():
    net = SelectiveNet(nn.Linear(3, 7), 6, 4)
    with pytest.raises(ValueError, match=r"width 7.*feature_dim=6"):
        net(torch.randn(4, 3))
    net3 = SelectiveNet(nn.Flatten(0), 6, 4)  # returns 1-D: not (B, D)
    with pytest.raises(ValueError, match=r"\(B, D\) or \(B, M, D\)"):
        net3(torch.randn(4, 6))


@pytest.mark.parametrize(
    ("kwargs", "exc", "match"),
    [
        ({"feature_dim": 0}, ValueError, "feature_dim"),
        ({"num_classes": 1}, ValueError, "num_classes"),
        ({"hidden": 0}, ValueError, "hidden"),
        ({"feature_dim": 6.0}, TypeError, "feature_dim"),
    ],
)
def test_constructor_validation(kwargs, exc, match):
    args = {"features": nn.Identity(), "feature_dim": 6, "num_classes": 4, **kwargs}
    hidden = args.pop("hidden", 512)
    with pytest.raises(exc, match=match):
        SelectiveNet(args["features"], args["feature_dim"], args["num_classes"], hidden=hidden)
    with pytest.raises(TypeError, match="nn.Module"):
        SelectiveNet(lambda x: x, 6, 4)


def test_on_a_headless_sigma_ensemble_of_a_project_backbone():
    import ensemblize as ez
    from ensemblize.selective import SyncLoss

    torch.manual_seed(0)
    backbone = ez.models.build_model("resnet_small", in_channels=1, num_classes=10, image_size=8)
    backbone.head = nn.Identity()  # (B, 1, 8, 8) -> (B, feature_dim)
    feats = ez.sigma_ensemble(backbone, members=3, seed=0)  # -> (B, 3, feature_dim)
    net = SelectiveNet(feats, backbone.feature_dim, 10, hidden=16)
    x, y = torch.randn(6, 1, 8, 8), torch.randint(0, 10, (6,))
    out = net(x)
    assert out.logits.shape == (6, 3, 10) and out.selection.shape == (6, 3)
    # one SYNC step with the ensemble's mean probability as prior reaches the backbone
    prior = out.logits.softmax(-1).mean(1).detach()
    SyncLoss(0.7, 1.0)(out, y, prior=prior).backward()
    assert all(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in net.selector.parameters())
    assert any(p.grad is not None and float(p.grad.abs().sum()) > 0 for p in feats.parameters())
    net.eval()
    with torch.no_grad():
        out, z = net(x), feats(x)
    for m in range(3):
        torch.testing.assert_close(out.logits[:, m], net.predictor(z[:, m]))
        torch.testing.assert_close(out.selection[:, m], net.heads(z[:, m]).selection)


def test_selection_head_layout_is_the_keras_reference():
    """Dense -> ReLU -> BatchNorm -> /10 -> Dense(1) -> sigmoid; the /10 keeps initial g near ½."""
    net = _net(hidden=7)
    kinds = [type(m).__name__ for m in net.selector]
    assert kinds == ["Linear", "ReLU", "BatchNorm1d", "_Divide", "Linear"]
    assert net.selector[3].divisor == 10.0 and net.selector[4].out_features == 1
    with torch.no_grad():
        net.selector[4].weight.fill_(1.0)
        net.selector[4].bias.zero_()
    net.eval()
    z = torch.randn(5, 6)
    lin1, _, bn, _, _ = net.selector
    a = bn(torch.relu(lin1(z)))
    torch.testing.assert_close(net.heads(z).selection, torch.sigmoid(a.sum(-1) / 10))
