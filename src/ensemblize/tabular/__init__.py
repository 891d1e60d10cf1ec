"""Tabular deep ensembles with scikit-learn conventions.

* :class:`LoMETabClassifier` / :class:`LoMETabRegressor` — fit / predict / predict_proba /
  predict_members / save / load estimators around :class:`LoMETabModel`;
* :class:`LoMETabModel` (:mod:`.model`) — piecewise-linear embeddings + a K-member MLP whose
  hidden layers are LoMETab (rank-r multiplicative), additive low-rank, TabM (BatchEnsemble),
  plain shared or fully independent layers;
* :func:`train_model` (:mod:`.train`) — the TabM training protocol with early stopping on the
  ensemble's validation score and per-epoch diversity;
* :func:`fit_gbdt` (:mod:`.gbdt`) — XGBoost / CatBoost baselines on the same splits.

Names are imported on first access.
"""

from __future__ import annotations

import importlib
from typing import Any

_ATTRIBUTES = {
    "LoMETabClassifier": "ensemblize.tabular.estimators",
    "LoMETabRegressor": "ensemblize.tabular.estimators",
    "LoMETabModel": "ensemblize.tabular.model",
    "LAYERS": "ensemblize.tabular.model",
    "EMBEDDINGS": "ensemblize.tabular.model",
    "train_model": "ensemblize.tabular.train",
    "TrainResult": "ensemblize.tabular.train",
    "auto_batch_size": "ensemblize.tabular.train",
    "fit_gbdt": "ensemblize.tabular.gbdt",
    "predict_gbdt": "ensemblize.tabular.gbdt",
    "GBDTModel": "ensemblize.tabular.gbdt",
    "GBDT_KINDS": "ensemblize.tabular.gbdt",
}
_SUBMODULES = ("estimators", "model", "train", "gbdt")

__all__ = sorted([*_ATTRIBUTES, *_SUBMODULES])


def __getattr__(name: str) -> Any:
    if name in _SUBMODULES:
        return importlib.import_module(f"ensemblize.tabular.{name}")
    if name in _ATTRIBUTES:
        return getattr(importlib.import_module(_ATTRIBUTES[name]), name)
    raise AttributeError(f"module 'ensemblize.tabular' has no attribute {name!r}")


def __dir__() -> list[str]:
    return __all__
