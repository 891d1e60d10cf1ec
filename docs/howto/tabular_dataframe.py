"""How-to: a tabular estimator on a raw DataFrame, with per-row uncertainty.

Run it:  python docs/howto/tabular_dataframe.py           (about a minute on one CPU thread)
         python docs/howto/tabular_dataframe.py --small   (a few seconds; what the test suite runs)

The estimators follow scikit-learn: ``fit(X, y)`` on the DataFrame as it comes — numeric columns
with NaNs, string / category columns with missing values, booleans — and ``predict``,
``predict_proba``, ``predict_uncertainty`` on new rows. Preprocessing (imputation with
missing-value indicators, a "missing" category, piecewise-linear bins) is fitted inside ``fit``
and stored with the model. ``predict_uncertainty`` returns one row per input row, indexed like
the input:

* classifiers: ``total_entropy`` H[p̄], ``expected_entropy`` E_k H[p_k] and ``mutual_information``
  (their difference: how much the K members disagree) in nats;
* regressors: ``mean`` and ``std`` (the member spread) in target units.

What the estimators tell you about a table rather than guess silently (warnings you can filter by
class, from ``ensemblize.data.tabular``): a column unique on every row (``IdentifierColumnWarning``),
a text column of ISO (or year-first slashed) dates read as categories — parse it with ``pd.to_datetime`` to use it as a time
(``DateStringWarning``), an object column of many integers read as codes
(``IntegerCategoryWarning``), a text column of decimal numbers read as categories
(``NumericTextWarning``), a text column with a level for more than a fifth of the rows, such as free
text or names (``ManyLevelsWarning``), and, at predict time, categories never seen in training
(``UnknownCategoryWarning``: each is read as no known category) and missing values in a numeric
column that had none in training (``UnseenMissingValueWarning``: filled with the training median).
"""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd

import ensemblize as ez

#: Public names this how-to needs (the test suite checks they exist before running it).
REQUIRES = (
    "ensemblize.tabular.LoMETabClassifier",
    "ensemblize.tabular.LoMETabRegressor",
    "ensemblize.tabular.LoMETabClassifier.predict_uncertainty",
    "ensemblize.tabular.LoMETabRegressor.predict_uncertainty",
)


def make_frame(n: int, seed: int = 0) -> tuple[pd.DataFrame, pd.Series, pd.Series]:
    """A raw loan table: numbers with gaps, a text category with gaps, a flag; two targets."""
    rng = np.random.default_rng(seed)
    income = rng.lognormal(10.5, 0.5, n)
    debt = rng.uniform(0, 1, n) * income
    age = rng.integers(18, 80, n).astype(float)
    purpose = rng.choice(["car", "house", "education", "other"], n)
    student = rng.random(n) < 0.2
    risk = 3 * debt / income - 0.02 * (age - 40) + (purpose == "education") * 0.8 + rng.normal(0, 0.5, n)
    default = pd.Series(np.where(risk > 1.6, "default", "repaid"), name="default")
    amount = pd.Series(0.3 * income + 5000 * (purpose == "house") + rng.normal(0, 2000, n), name="amount")
    X = pd.DataFrame({"income": income, "debt": debt, "age": age, "purpose": purpose, "student": student})
    X.loc[rng.random(n) < 0.1, "income"] = np.nan  # missing numbers
    X.loc[rng.random(n) < 0.05, "purpose"] = None  # missing categories
    X["purpose"] = X["purpose"].astype("category")
    return X, default, amount


def main(small: bool = False) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    X, default, amount = make_frame(600 if small else 4000, seed=0)
    X_new, default_new, amount_new = make_frame(200, seed=1)
    size = (
        {"members": 8, "n_blocks": 1, "d_block": 32, "max_epochs": 5, "patience": 3}
        if small
        else {"members": 16}
    )

    clf = ez.tabular.LoMETabClassifier(random_state=0, **size).fit(X, default)
    proba = clf.predict_proba(X_new)  # (N, 2), columns in clf.classes_ order
    unc = clf.predict_uncertainty(X_new)  # DataFrame indexed like X_new
    accuracy = float((clf.predict(X_new) == default_new.to_numpy()).mean())
    print(f"classifier: accuracy {accuracy:.3f} on {len(X_new)} new rows; classes {list(clf.classes_)}")
    view = X_new.join(unc).assign(p_default=proba[:, list(clf.classes_).index("default")])
    print("the five rows the members disagree on most:")
    print(view.sort_values("mutual_information", ascending=False).head(5).round(3).to_string())

    reg = ez.tabular.LoMETabRegressor(random_state=0, **size).fit(X, amount)
    spread = reg.predict_uncertainty(X_new)  # columns mean, std
    rmse = float(np.sqrt(np.mean((spread["mean"].to_numpy() - amount_new.to_numpy()) ** 2)))
    print(
        f"regressor: RMSE {rmse:,.0f}; member std per row from {spread['std'].min():,.0f} to {spread['std'].max():,.0f}"
    )
    return {"accuracy": accuracy, "rmse": rmse, "mean_mi": float(unc["mutual_information"].mean())}


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few seconds instead of a minute")
    main(small=parser.parse_args().small)
