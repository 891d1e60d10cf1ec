"""Tabular deep ensembles with scikit-learn conventions.

* :class:`LoMETabClassifier` / :class:`LoMETabRegressor` — fit / predict / predict_proba /
  predict_members / save / load estimators around :class:`LoMETabModel`;
* :class:`TabMClassifier` / :class:`TabMRegressor` (:mod:`.tabm_baseline`) — official TabM (the
  ``tabm`` package) with the same preprocessing, training path and outputs (:mod:`.estimator_base`);
* :class:`LoMETabModel` (:mod:`.model`) — piecewise-linear embeddings + a K-member MLP whose
  hidden layers are LoMETab (rank-r multiplicative), additive low-rank, TabM (BatchEnsemble),
  plain shared or fully independent layers;
* :class:`PooledNetworks` (:mod:`.pooled`) — several independently trained ensembles as one, their
  members concatenated (an estimator's ``model_`` when ``n_networks > 1``);
* :func:`train_model` (:mod:`.train`) — the TabM training protocol with early stopping on the
  ensemble's validation score and per-epoch diversity;
* :class:`GBDTClassifier` / :class:`GBDTRegressor` and :func:`fit_gbdt` (:mod:`.gbdt`) — XGBoost /
  CatBoost baselines (lr 0.05, ≤ 4,000 rounds, early stopping) on the same preprocessing and splits;
* :func:`tune` / :func:`tune_csv` (:mod:`.tuning`) — Optuna search over :func:`lometab_search_space`
  within a time / trial budget, pruning during training; :class:`TuneResult` holds the best model.

Names are imported on first access.
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_ATTRIBUTES = {
    "LoMETabClassifier": "ensemblize.tabular.estimators",
    "LoMETabRegressor": "ensemblize.tabular.estimators",
    "TabMClassifier": "ensemblize.tabular.tabm_baseline",
    "TabMRegressor": "ensemblize.tabular.tabm_baseline",
    "TabMNetwork": "ensemblize.tabular.tabm_baseline",
    "LoMETabModel": "ensemblize.tabular.model",
    "LAYERS": "ensemblize.tabular.model",
    "EMBEDDINGS": "ensemblize.tabular.model",
    "PooledNetworks": "ensemblize.tabular.pooled",
    "train_model": "ensemblize.tabular.train",
    "TrainResult": "ensemblize.tabular.train",
    "auto_batch_size": "ensemblize.tabular.train",
    "GBDTClassifier": "ensemblize.tabular.gbdt",
    "GBDTRegressor": "ensemblize.tabular.gbdt",
    "fit_gbdt": "ensemblize.tabular.gbdt",
    "predict_gbdt": "ensemblize.tabular.gbdt",
    "GBDTModel": "ensemblize.tabular.gbdt",
    "GBDT_KINDS": "ensemblize.tabular.gbdt",
    "NormalizedTabMLP": "ensemblize.tabular.sigma_mlp",
    "build_sigma_tab_mlp": "ensemblize.tabular.sigma_mlp",
    "sigma_regularizer": "ensemblize.tabular.sigma_mlp",
    "tune": "ensemblize.tabular.tuning",
    "tune_csv": "ensemblize.tabular.tuning",
    "lometab_search_space": "ensemblize.tabular.tuning",
    "TuneResult": "ensemblize.tabular.tuning",
}
_SUBMODULES = (
    "estimators",
    "estimator_base",
    "table_pipeline",
    "tabm_baseline",
    "inputs",
    "bins",
    "uncertainty",
    "model",
    "pooled",
    "train",
    "gbdt",
    "sigma_mlp",
    "tuning",
)

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES, _SUBMODULES)
