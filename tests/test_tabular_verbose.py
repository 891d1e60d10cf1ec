"""Tabular estimators' ``verbose=True``: labelled progress on stderr (one line per epoch when stderr is
not a terminal, as under pytest), and nothing at all with ``verbose=False``."""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from ensemblize.tabular import LoMETabClassifier


def _table(n: int = 60) -> tuple[pd.DataFrame, np.ndarray]:
    rng = np.random.default_rng(0)
    x = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    return x, (x["a"] > 0).to_numpy().astype(int)


def _fit(verbose: bool) -> LoMETabClassifier:
    torch.set_num_threads(1)
    x, y = _table()
    est = LoMETabClassifier(
        members=2, max_epochs=3, patience=10, n_networks=2, verbose=verbose, random_state=0
    )
    return est.fit(x, y)


def test_verbose_prints_one_labelled_line_per_epoch(capfd):
    est = _fit(True)
    captured = capfd.readouterr()
    lines = [ln for ln in captured.err.splitlines() if "LoMETabClassifier" in ln]
    assert len(lines) == len(est.history_) == 6, captured.err
    assert all("M=2, seed 0, network 1/2" in ln for ln in lines[:3]), lines
    assert all("M=2, seed 0, network 2/2" in ln for ln in lines[3:]), lines  # the estimator's seed
    assert captured.out == ""


def test_not_verbose_prints_nothing(capfd):
    _fit(False)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
