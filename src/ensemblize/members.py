"""The member axis: one place that defines how M ensemble members ride along a batch.

Contract (DESIGN.md):

* the logical layout is batch-major, member-minor: ``(B, M, ...)``;
* convolutional backbones flatten it to ``(B·M, ...)`` in ``repeat_interleave`` order — row
  ``b·M + m`` holds sample ``b`` as seen by member ``m``. In that order ``x.view(B, M·C, H, W)``
  puts member ``m``'s channels at ``[m·C, (m+1)·C)``, which is what lets per-member BatchNorm run
  as one call of the stock kernel.

``expand``/``fold``/``unfold`` are views or one ``expand`` — never a Python loop over members.
"""

from __future__ import annotations

import torch
from torch import Tensor

from ._checks import check_size

#: Largest ensemble size accepted anywhere (checked before any per-member tensor is allocated):
#: far above every method's use (4–64 members), and low enough that a typo such as
#: ``members=10**9`` fails at once instead of exhausting memory.
MAX_MEMBERS = 4096


def check_members(members: object) -> int:
    """Return ``members`` as a Python int if it is an integer in ``[1, MAX_MEMBERS]`` (NumPy integers
    included, bool not).

    Raises TypeError for a non-integer and ValueError outside the range, naming ``members`` and the value.
    """
    return check_size(members, name="members", maximum=MAX_MEMBERS)


def expand(x: Tensor, members: int) -> Tensor:
    """``(B, ...) -> (B, M, ...)``: every member sees every sample (a broadcast view, no copy)."""
    check_members(members)
    return x.unsqueeze(1).expand(x.shape[0], members, *x.shape[1:])


def fold(x: Tensor) -> Tensor:
    """``(B, M, ...) -> (B·M, ...)`` in repeat_interleave order (copies only if ``x`` is a broadcast view)."""
    if x.dim() < 2:
        raise ValueError(f"fold expects a (B, M, ...) tensor, got shape {tuple(x.shape)}")
    return x.reshape(x.shape[0] * x.shape[1], *x.shape[2:])


def unfold(x: Tensor, members: int) -> Tensor:
    """``(B·M, ...) -> (B, M, ...)``; the leading size must be a multiple of ``members``."""
    check_members(members)
    if x.shape[0] % members:
        raise ValueError(
            f"leading size {x.shape[0]} is not a multiple of members={members}; "
            "expected the interleaved (B·M, ...) layout"
        )
    return x.reshape(x.shape[0] // members, members, *x.shape[1:])


def interleave(x: Tensor, members: int) -> Tensor:
    """``(B, ...) -> (B·M, ...)``: each sample repeated for its M members, in contract order."""
    return fold(expand(x, members))


def mean_probabilities(member_logits: Tensor) -> Tensor:
    """Aggregate on probabilities, never logits: ``p̄ = mean_m softmax(z_m)``; ``(B, M, C) -> (B, C)``."""
    return torch.softmax(member_logits, dim=-1).mean(dim=1)
