"""Would a fused σLayerNorm close the every-norm σN-Ens gap on the ViTs? An experiment, not a shipped path.

Run: ``.venv/bin/python benchmarks/bench_fused_sigma_ln.py [ROUNDS]`` (default 15; needs a C++ compiler
for ``torch.compile``'s CPU backend).

Stock :class:`ensemblize.nn.SigmaLayerNorm` runs two kernels (a unit-affine LayerNorm, then the
per-member affine ``x̂ ⊙ σ(γ_t)w + σ(γ_t)b_t`` as an evaluation-mode batch-norm call) because no stock
CPU kernel applies a per-member affine inside LayerNorm. Here every σLayerNorm of the every-norm
σN-Ens ViT is patched, on one copy of the model, to the same equation compiled by ``torch.compile``
(which fuses normalisation and affine into one loop forward and one backward), and the training step of
the floor (plain ViT on the B·M batch), the stock σN-Ens and the fused σN-Ens are timed in one
interleaved run with :func:`bench_image.time_case` (median paired ratio to the floor and its ~95 %
interval). The fused output is checked against the stock one first.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_image as B  # noqa: E402
from ensemblize.nn.sigma_norm import SigmaLayerNorm  # noqa: E402


def _sigma_layer_norm(
    x: Tensor, gate_logits: Tensor, weight: Tensor, bias: Tensor, eps: float, members: int
) -> Tensor:
    """``y[b, t] = LN(x[b, t]) ⊙ σ(γ_t) w + σ(γ_t) b_t`` on the interleaved ``(B·M, ..., C)`` layout."""
    gate = torch.sigmoid(gate_logits)
    scale, shift = gate * weight, gate * bias  # (M, C)
    c = x.shape[-1]
    batch = x.shape[0] // members
    view = (1, members, *(1,) * (x.dim() - 2), c)
    xhat = F.layer_norm(x, (c,), None, None, eps).view(batch, members, *x.shape[1:])
    return (xhat * scale.view(view) + shift.view(view)).view(x.shape)


_fused = torch.compile(_sigma_layer_norm, dynamic=False)


def _fused_forward(self: SigmaLayerNorm, x: Tensor) -> Tensor:
    return _fused(x, self.gate_logits, self.weight, self.bias, self.eps, self.members)


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    torch.set_num_threads(1)
    for key in ("vit_small-digits", "vit_small-cifar"):
        case = next(c for c in B.CASES if c.key == key)
        setups = {m: B.build_setup(case, m, members=4, batch=64) for m in ("floor", "sigma")}
        fused = B.build_setup(case, "sigma", members=4, batch=64)
        patched = 0
        for module in fused.model.modules():
            if isinstance(module, SigmaLayerNorm):
                module.forward = types.MethodType(_fused_forward, module)
                patched += 1
        setups["sigma_fused"] = fused
        with torch.no_grad():
            gap = (
                (setups["sigma"].model(setups["sigma"].x) - fused.model(setups["sigma"].x)).abs().max().item()
            )
        t = B.time_case(setups, rounds=rounds, warmup=3, steps_per_sample=2)
        cells = ", ".join(
            f"{m} {t.ratio[m]:.3f} [{t.interval[m][0]:.3f}, {t.interval[m][1]:.3f}] (CPU {t.cpu_ratio[m]:.3f})"
            for m in setups
        )
        print(
            f"{key}: {patched} σLayerNorm fused, max |fused − stock| output {gap:.1e}; step / floor: {cells}"
        )


if __name__ == "__main__":
    main()
