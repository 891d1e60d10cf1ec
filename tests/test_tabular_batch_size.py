"""``batch_size="auto"``: TabM's tiers, with the LoMETab regressor's smaller batch on small tables —
the rule each estimator resolves, and the defaults digest that changes with it."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ensemblize.experiments import tabular_methods
from ensemblize.tabular import LoMETabClassifier, LoMETabRegressor, TabMRegressor
from ensemblize.tabular.train import auto_batch_size

TINY = {
    "members": 2,
    "n_blocks": 1,
    "d_block": 8,
    "max_epochs": 1,
    "patience": 1,
    "n_networks": 1,
    "n_bins": 4,
}


@pytest.mark.parametrize(
    ("n", "small", "expected"),
    [
        (1, 256, 256),
        (10_000, 256, 256),
        (10_001, 256, 512),
        (50_000, 128, 512),
        (50_001, 128, 1024),
        (659, 128, 128),
    ],
)
def test_auto_batch_size_tiers(n, small, expected):
    assert auto_batch_size(n, small=small) == expected


def test_auto_batch_size_names_a_bad_small_size():
    with pytest.raises(ValueError, match="small"):
        auto_batch_size(100, small=0)


def _table(n, seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame({"a": rng.normal(size=n), "b": rng.normal(size=n)})
    return X, X["a"] - X["b"] + 0.1 * rng.normal(size=n)


@pytest.mark.parametrize(
    ("cls", "n_rows", "expected"),
    [
        (LoMETabRegressor, 300, 128),
        (LoMETabClassifier, 300, 256),
        (TabMRegressor, 300, 256),
        (LoMETabRegressor, 12_600, 512),
    ],
)
def test_each_estimator_resolves_its_auto_batch(cls, n_rows, expected):
    X, y = _table(n_rows)
    if cls is LoMETabClassifier:
        y = (y > 0).astype(int)
    params = (
        TINY
        if cls is not TabMRegressor
        else {"members": 2, "n_blocks": 1, "d_block": 8, "max_epochs": 1, "patience": 1}
    )
    est = cls(**params, random_state=0).fit(X, y)
    assert est.batch_size_ == expected  # 80 % of 12,600 rows train: above the 10k tier
    assert cls(**params, batch_size=64, random_state=0).fit(X.iloc[:200], y.iloc[:200]).batch_size_ == 64


def test_the_defaults_digest_follows_the_auto_batch_rule(monkeypatch):
    digest = tabular_methods.defaults_digest.__wrapped__  # uncached
    before = digest()
    monkeypatch.setattr(LoMETabRegressor, "_small_auto_batch", 256)
    assert digest() != before
