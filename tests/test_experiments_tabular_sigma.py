"""σN-Ens on tables: the normalised MLP, its σN conversion, and train_model's regulariser hook."""

from __future__ import annotations

import pytest
import torch

from ensemblize.diversity import softmax_temperature_loss
from ensemblize.tabular.sigma_mlp import NormalizedTabMLP, build_sigma_tab_mlp, sigma_regularizer
from ensemblize.tabular.train import train_model

ARCH = {"n_num": 3, "cat_cardinalities": [2], "n_blocks": 2, "d_block": 8, "dropout": 0.0,
        "embedding": "linear", "d_embedding": 4}  # fmt: skip


def _x(n=12, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 3, generator=g)
    cat = torch.nn.functional.one_hot(torch.randint(0, 2, (n,), generator=g), 2).float()
    return torch.cat([x, cat], dim=1)


@pytest.mark.parametrize("norm", ["batchnorm", "layernorm"])
@pytest.mark.parametrize("regression", [False, True])
def test_noise_zero_members_equal_plain_mlp_forward_and_backward(norm, regression):
    n_out = 1 if regression else 3
    torch.manual_seed(0)
    plain = NormalizedTabMLP(**ARCH, n_out=n_out, regression=regression, norm=norm)
    torch.manual_seed(0)  # same initialisation inside build_sigma_tab_mlp
    ens = build_sigma_tab_mlp(members=4, noise=0.0, **ARCH, n_out=n_out, regression=regression, norm=norm)
    torch.testing.assert_close(ens.backbone.head.weight, plain.head.weight, rtol=0, atol=0)
    x = _x()
    for mode in ("train", "eval"):
        plain.train(mode == "train")
        ens.train(mode == "train")
        ref = plain(x)
        out = ens(x)
        assert out.shape == ((12, 4) if regression else (12, 4, 3))
        want = ref[:, None].expand_as(out)
        torch.testing.assert_close(out, want, rtol=1e-5, atol=1e-5)
    # backward: the shared first linear layer receives the sum of the members' (identical) gradients
    plain.train()
    ens.train()
    w = torch.randn(*ens(x).shape, generator=torch.Generator().manual_seed(1))
    (ens(x) * w).sum().backward()
    (plain(x)[:, None] * w).sum().backward()
    torch.testing.assert_close(
        ens.backbone.backbone[0].weight.grad, plain.backbone[0].weight.grad, rtol=1e-4, atol=1e-5
    )


def test_normalized_mlp_structure_and_bad_input():
    m = NormalizedTabMLP(**ARCH, n_out=3, regression=False, norm="layernorm")
    kinds = [type(b).__name__ for b in m.backbone]
    assert kinds == ["Linear", "LayerNorm", "ReLU", "Dropout"] * 2
    assert m(_x()).shape == (12, 3)
    with pytest.raises(ValueError, match="'groupnorm'"):
        NormalizedTabMLP(**ARCH, n_out=3, regression=False, norm="groupnorm")
    with pytest.raises(ValueError, match=r"\(12, 2, 5\)"):
        m(_x()[:, None].expand(12, 2, 5))
    assert sigma_regularizer(1.0, 0.0) is None
    with pytest.raises(ValueError, match="tau"):
        sigma_regularizer(0.0, 1e-3)


def test_train_model_regularizer_hook_values():
    """With lr = 0 nothing moves: the logged regulariser is its value; the task loss is unchanged by it."""
    torch.manual_seed(0)
    x, y = _x(40), torch.randint(0, 3, (40,))
    xv, yv = _x(16, seed=1), torch.randint(0, 3, (16,))
    ens = build_sigma_tab_mlp(members=3, noise=0.5, seed=0, **ARCH, n_out=3, regression=False)
    reg = sigma_regularizer(0.5, 0.01)
    kw = {
        "regression": False,
        "members": 3,
        "lr": 0.0,
        "weight_decay": 0.0,
        "max_epochs": 2,
        "batch_size": 40,
    }
    with_reg = train_model(ens, x, y, xv, yv, regularizer=reg, **kw)
    without = train_model(ens, x, y, xv, yv, **kw)
    expected = float(softmax_temperature_loss(ens, 0.5, 0.01).detach())
    assert with_reg.history[0]["train_regularizer"] == pytest.approx(expected, rel=1e-6)
    assert "train_regularizer" not in without.history[0]
    assert with_reg.history[0]["train_loss"] == pytest.approx(without.history[0]["train_loss"], rel=1e-6)


def test_regularizer_drives_gates():
    """A strong low-τ regulariser pushes gates towards a vertex; without it they barely move.

    Trained through :func:`ensemblize.training.fit` without early stopping (train_model restores the
    best validation epoch, which on these random labels can be any early epoch).
    """
    from ensemblize.training import fit

    x, y = _x(64), torch.randint(0, 3, (64,))

    def spread(lam):
        torch.manual_seed(0)
        ens = build_sigma_tab_mlp(members=3, noise=0.5, seed=0, **ARCH, n_out=3, regression=False)
        fit(ens, (x, y), None, epochs=15, batch_size=64, optimizer="adamw", lr=0.05, weight_decay=0.0,
            schedule="none", regularizer=sigma_regularizer(0.2, lam), progress=False)  # fmt: skip
        gates = torch.cat([m.gates().flatten() for _, m in ens.sigma_layers()])
        return float((gates.detach() - 0.5).abs().mean())

    assert spread(0.05) > spread(0.0) + 0.1
