"""Evaluation mode for one pass, restoring every submodule's own train/eval flag afterwards."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from torch import nn

__all__ = ["eval_mode"]


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """Put ``module`` and all its submodules in eval mode; on exit restore each one's flag.

    ``module.train(was)`` would not do: it sets *every* submodule to the wrapper's flag, so a model
    whose layers were in different modes (a frozen BatchNorm kept in eval mode inside a training
    model, or a wrapper whose flag differs from its layers') would come out changed.
    """
    flags = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        yield module
    finally:
        for m, was in flags:
            m.training = was
