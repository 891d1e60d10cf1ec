"""Layer details an audit found: σLayerNorm / σGroupNorm in one compiled graph; BatchEnsemble and
Packed layers under autocast (as LoMELinear and torch's layers); Packed layers' device / dtype; their
argument names in errors."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from ensemblize.nn import (
    BatchEnsembleConv2d,
    BatchEnsembleLinear,
    PackedConv2d,
    PackedLinear,
    SigmaBatchNorm1d,
    SigmaGroupNorm,
    SigmaLayerNorm,
)


@pytest.mark.parametrize(
    ("layer", "shape"),
    [(SigmaLayerNorm(4, 2), (6, 4)), (SigmaGroupNorm(2, 4, 2), (6, 4, 3)), (SigmaBatchNorm1d(4, 2), (6, 4))],
    ids=["layernorm", "groupnorm", "batchnorm"],
)
def test_sigma_norms_compile_in_one_graph_with_the_eager_values(layer, shape):
    torch._dynamo.reset()
    torch.manual_seed(0)
    x = torch.randn(*shape)
    with torch.no_grad():
        layer.gate_logits.normal_()
    layer.eval() if isinstance(layer, SigmaBatchNorm1d) else layer.train()
    want = layer(x)
    got = torch.compile(layer, fullgraph=True, backend="eager")(x)
    torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_batchensemble_and_packed_layers_take_autocast_activations():
    """An nn.Linear / nn.Conv2d under CPU bf16 autocast hands on bfloat16; these layers refused it."""
    torch.manual_seed(0)
    cases = [
        (nn.Linear(6, 5), BatchEnsembleLinear(5, 4, 3), torch.randn(4, 3, 6)),
        (nn.Linear(6, 8), PackedLinear(4, 4, 2, 2.0), torch.randn(4, 6)),  # c_in = alpha · 4
        (nn.Conv2d(2, 4, 1), BatchEnsembleConv2d(4, 4, 3, 2, padding=1), torch.randn(4, 2, 5, 5)),
        (nn.Conv2d(2, 8, 1), PackedConv2d(4, 4, 3, 2, 2.0, padding=1), torch.randn(2, 2, 5, 5)),
    ]
    for before, layer, x in cases:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            h = before(x)
            assert h.dtype == torch.bfloat16
            y = layer(h)
        want = layer(h.float())  # the same numbers in float32: agreement to bf16 rounding
        torch.testing.assert_close(y.float(), want, rtol=0.05, atol=0.05)
        with pytest.raises(TypeError, match="does not match the layer's torch.float32"):
            layer(h)  # outside autocast the dtype check stands


def test_packed_layers_take_device_and_dtype_and_name_their_own_arguments():
    lin = PackedLinear(4, 6, 2, 2.0, dtype=torch.float64, device="cpu")
    conv = PackedConv2d(4, 6, 3, 2, 2.0, dtype=torch.float64)
    assert {p.dtype for p in [*lin.parameters(), *conv.parameters()]} == {torch.float64}
    assert lin(torch.randn(3, 8, dtype=torch.float64)).dtype == torch.float64
    with pytest.raises(ValueError, match="in_features must be >= 1, got 0"):
        PackedLinear(0, 4, 2, 2.0)
    with pytest.raises(ValueError, match="out_features must be >= 1"):
        PackedLinear(4, 0, 2, 2.0)
