"""The shared hold-out split: a partition, scikit-learn's split when no class is seen once, and a
class seen on one row never held out — in ``holdout_indices`` itself and in an estimator's own
validation split (``fit`` without ``eval_set``)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.model_selection import train_test_split

from ensemblize.tabular import LoMETabClassifier
from ensemblize.tabular.holdout import holdout_indices
from ensemblize.tabular.tuning import _split


@st.composite
def labels_and_holdout(draw):
    n_classes = draw(st.integers(2, 5))
    counts = draw(st.lists(st.integers(1, 12), min_size=n_classes, max_size=n_classes))
    y = np.repeat(np.arange(n_classes), counts)
    y = np.random.default_rng(draw(st.integers(0, 10**6))).permutation(y)
    pool = int(np.sum([c for c in counts if c >= 2]))
    if pool < 2:
        return y, None
    return y, draw(st.integers(1, pool - 1))


@settings(max_examples=80, deadline=None)
@given(labels_and_holdout(), st.integers(0, 1000))
def test_holdout_partitions_and_never_holds_out_a_class_seen_once(case, seed):
    y, n_holdout = case
    if n_holdout is None:
        with pytest.raises(ValueError, match="cannot hold out"):
            holdout_indices(y, n_holdout=1, seed=seed, classify=True)
        return
    first, held = holdout_indices(y, n_holdout=n_holdout, seed=seed, classify=True)
    assert len(held) == n_holdout
    np.testing.assert_array_equal(np.sort(np.concatenate([first, held])), np.arange(len(y)))
    values, counts = np.unique(y, return_counts=True)
    once = set(values[counts == 1].tolist())
    assert not once & set(y[held].tolist())
    if not once:  # exactly scikit-learn's split (what the estimators did before the rule existed)
        strat = y if min(n_holdout, len(y) - n_holdout) >= len(values) else None
        ref_first, ref_held = train_test_split(
            np.arange(len(y)), test_size=n_holdout, random_state=seed, stratify=strat
        )
        np.testing.assert_array_equal(held, np.sort(ref_held))
        np.testing.assert_array_equal(first, np.sort(ref_first))


def test_regression_is_a_plain_seeded_shuffle_split():
    y = np.linspace(0.0, 1.0, 50)
    first, held = holdout_indices(y, n_holdout=10, seed=3, classify=False)
    ref_first, ref_held = train_test_split(np.arange(50), test_size=10, random_state=3)
    np.testing.assert_array_equal(held, np.sort(ref_held))
    np.testing.assert_array_equal(first, np.sort(ref_first))


def test_bad_sizes_name_the_counts():
    with pytest.raises(ValueError, match=r"cannot hold out 0 of 4 rows"):
        holdout_indices(np.arange(4.0), n_holdout=0, seed=0, classify=False)
    with pytest.raises(ValueError, match=r"cannot hold out 3 of 5 rows.*2 row\(s\) of classes seen once"):
        holdout_indices(np.array([0, 0, 0, 1, 2]), n_holdout=3, seed=0, classify=True)
    with pytest.raises(ValueError, match=r"val_fraction=0.9: cannot hold out"):
        _split(np.zeros((5, 1)), np.array([0, 0, 0, 1, 2]), val_fraction=0.9, seed=0, classify=True)


def test_fit_without_eval_set_keeps_a_one_row_class_in_training():
    # mtcars' `carb` has classes 6 and 8 on one row each; before the shared rule, seed 2 put class 6
    # into the estimator's validation rows and the network never trained on it
    rng = np.random.default_rng(0)
    y = np.array([1] * 7 + [2] * 10 + [3] * 3 + [4] * 10 + [6] + [8])
    X = pd.DataFrame({"a": rng.normal(size=len(y)), "b": rng.normal(size=len(y))})
    est = LoMETabClassifier(random_state=2)
    est.classes_ = np.unique(y)
    for seed in range(25):
        _, y_tr, _, y_va = est._validation_split(X, y, None, seed)
        assert {6, 8} <= set(y_tr.tolist())
        assert not {6, 8} & set(y_va.tolist())
        assert len(y_va) == round(0.2 * len(y))
