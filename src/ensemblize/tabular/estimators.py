"""scikit-learn style LoMETab estimators: :class:`LoMETabClassifier` and :class:`LoMETabRegressor`.

Everything but the network is shared with the official-TabM baseline
(:mod:`ensemblize.tabular.tabm_baseline`) in :mod:`ensemblize.tabular.estimator_base`: raw
DataFrames (missing values imputed by default, stable column meaning, datetimes), validation split,
preprocessing, bins, training through :func:`ensemblize.tabular.train.train_model`, float64
probabilities, ``predict_uncertainty``, save / ``load(path, device=...)``.

The network is :class:`~ensemblize.tabular.model.LoMETabModel`. Defaults for LoMETab's two
diversity axes (paper: the adapter rank ``r`` and the init scale ``σ_init`` jointly control pairwise
KL over orders of magnitude; a low ``σ_init`` gives low diversity whatever the rank, a higher one
"switches on" the rank axis; the best pair is dataset-dependent): ``rank=2`` — the smallest rank
whose weight family strictly contains TabM's rank-1 masks — and ``init_scale=4.0``, i.e. each
residual entry of ``A_k B_kᵀ`` starts with standard deviation 4 (see :class:`ensemblize.nn.LoMELinear`).

How they were chosen (issue 11; ``scripts/select_lometab_default.py``, docs/results/tabular_bench.md):
by mean **validation** rank across 12 of the 16 tables of :data:`ensemblize.data.tables.BENCHMARK_SUITE` (the other four — cps1988, storms, default, taxi — held out)
(64/16/20 split, seed 0), each setting ranked with official TabM, XGBoost and CatBoost on validation
accuracy, log-loss and RMSE (the mean of the three mean ranks), at K = 16, 2 blocks of 128, ≤ 80
epochs. Of 9 settings (rank 1/2/4, σ_init 1/2/4, lr 1e-3/2e-3/4e-3, weight decay 0/3e-4, early
stopping on accuracy or NLL), ``rank=2, init_scale=4.0`` with TabM's lr 2e-3, weight decay 3e-4 and
accuracy monitor ranked best (2.09; the former ``init_scale=1.0``: 2.54, the worst). No test score was
used. The old σ_init = 1 left the members 2.5–12x less diverse than TabM's. A second round
(``--refine``: single-knob variations of that choice) tried dropout 0 / 0.2, weight decay 3e-3 and the
NLL monitor: on seed 0 ``dropout=0.0`` ranked best (1.94 vs 2.09), but over model seeds 0–2 (the
validation scores recorded by the 3-seed benchmark runs of both settings) dropout 0.1 ranks better
(1.98 vs 2.04): the seed-0 difference was noise, and the classifier keeps 0.1. On the regression tables
alone the same 3-seed validation scores prefer dropout 0 (validation RMSE rank 2.00 vs 2.33 against the
field; concrete 0.246 vs 0.257, ames 0.222 vs 0.224, wage 0.840 vs 0.840), so the regressor's default
is 0.0. A third round chose the shape: the search ran at K = 16, 2 blocks of 128, ≤ 80 epochs
(patience 12), and that shape, fitted with model seeds 0–2, has a better mean validation rank against
official TabM at *its* defaults, XGBoost and CatBoost (1.94) than the same knobs at the former full
size, K = 32, 3 blocks of 256, ≤ 200 epochs, patience 16 (2.04), at about a ninth of its CPU time — so
it is the default (rule fixed before the full-size scores were read; ``docs/results/tabular_bench.md``).
A fifth round pooled independently seeded networks (``n_networks``; members concatenated, see
:class:`ensemblize.tabular.PooledNetworks`): three networks rank 1.74 on validation against the same
field, one network 1.94 (two 1.83; per-member batches instead 2.04), so ``n_networks=3`` is the
default — three fits, about 0.2x official TabM's CPU at its defaults (``scripts/check_lometab_bagging.py``,
``scripts/choose_lometab_networks.py``).
A seventh round chose the regressor's batch size by validation RMSE over three 64/16/20 splits
(split seeds 0–2, model seeds 0–2), because one small table's validation split cannot tell settings
apart (``scripts/choose_regressor_setting.py``, rule committed before its fits): of five single-knob
changes screened on concrete, wage and nmes (9 cells), ``batch_size`` 128 ranked best (2.56; the
default 3.00, 64: 3.11, weight decay 3e-3: 4.00, lr 1e-3: 4.11, dropout 0.1: 4.22), and it beat the
default on 14 of the confirmation's 18 cells (six regression tables × three splits; mean rank 1.28
vs 1.72), so the regressor's ``"auto"`` batch is 128 on up to 10k training rows (the size of every table
it was chosen on; larger tables keep 512 / 1024).
The ninth round (same rule, pre-registered) tried the learning-rate schedule: ``lr_schedule="plateau"``
(lr × 0.3 after every 4 stalled epochs) ranked last in the screen (3.83; with patience 24 2.50) —
cutting the rate ended concrete's fits at worse validation RMSE (0.257–0.289 vs 0.221–0.264) — while
its control, ``patience`` 24 at a constant rate, ranked best (1.67 vs the default's 2.00) and beat the
default on 10 of the 18 confirmation cells (mean rank 1.22 vs 1.78; the other 8 identical fits, where
no better epoch came after the 12th stalled one), so the regressor's patience is 24.
The tenth round (pre-registered in 2c0a464, ``scripts/choose_classifier_setting.py``) put the same
question to the classifier: patience 24 against 12 on validation accuracy and log-loss over the nine
classification tables × three splits (27 cells), replacing the default only if the mean of its two mean
ranks was lower. It was, by the narrowest margin (1.491 vs 1.509: accuracy better in 7 cells and worse
in 4, log-loss better in 6 and worse in 8), so the classifier's patience is 24 too.
The eleventh and twelfth rounds (same script, a stricter rule: no loss of log-loss rank) tried the
classifier at batch 128, alone and with ``calibration="temperature"`` (scored on cross-fitted
validation): both gained accuracy rank (1.30 vs 1.70) and lost log-loss rank (1.63 and 1.52 vs 1.37
and 1.48), so the classifier keeps TabM's batch 256.
The thirteenth round (pre-registered in the same script and in ``choose_regressor_setting.py``) tried an
exponential moving average of the weights, ``ema_decay=0.999`` (:mod:`ensemblize.training.averaging`),
which validation, early stopping and the fitted network use. Under round 11's rule the classifier's
validation ranks moved the other way from rounds 10–12: log-loss 1.33 vs 1.67, accuracy 1.61 vs 1.39,
mean 1.47 vs 1.53 — so the classifier averages its weights by default; the regressor's screen (concrete,
wage, nmes × three splits) rejected it (1.67 vs 1.33; worse on concrete in all three splits), so the
regressor keeps ``None``.
The fourteenth round (same rule, pre-registered before its fits) raised the classifier's epoch cap from
80 to official TabM's 200: every hpc network had run to the cap with a late best epoch, while on the
other eight tables every network stopped early (their fits came out identical). 200 won two of hpc's
three validation cells on accuracy and all three on log-loss (mean ranks over the 27 cells 1.46 and
1.44 vs 1.54 and 1.56), so both estimators now stop at 200 epochs.
The fifteenth round (pre-registered, ``choose_regressor_setting.py --round 15``) tried
``refit_full=True`` for the regressor: after early stopping, retrain each network on training +
validation rows for its chosen epochs. A refitted network cannot be ranked on the validation rows it
trained on, so the round ran nested (both candidates fitted on an 80/20 division of each split's
training rows, ranked on the split's validation rows): refit ranked 1.44 vs 1.56 on the screen and
was better in 12 of the 17 confirmation cells fitted (its mean rank below the default's whatever the
18th), so the regressor refits by default, at about 1.7x its former CPU; the classifier does not.
The sixteenth round (same nested rule, pre-registered, ``--round 16``) pooled five networks in the
regressor instead of three: 1.11 vs 1.89 on the screen, better in 15 of the 16 confirmation cells
fitted (its mean rank below the default's whatever the two unfitted cells), so the regressor pools
five networks (5/3 of its former network CPU); the classifier keeps three.
Tune per dataset (:func:`ensemblize.tabular.tune`).
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from ensemblize._checks import check_choice, check_int
from ensemblize.tabular.bins import safe_bins
from ensemblize.tabular.estimator_base import (
    CALIBRATIONS,
    TRAINING_DEFAULTS,
    EnsembleClassifierMixin,
    EnsembleRegressorMixin,
    TabularEnsembleEstimator,
    estimator_init,
    signature_defaults,
)
from ensemblize.tabular.inputs import check_real
from ensemblize.tabular.model import EMBEDDINGS, LAYERS, LoMETabModel
from ensemblize.tabular.train import MONITORS

__all__ = ["LoMETabClassifier", "LoMETabRegressor", "safe_bins"]


class _LoMETabBase(TabularEnsembleEstimator):
    """LoMETab hyper-parameters and network; use :class:`LoMETabClassifier` or :class:`LoMETabRegressor`."""

    _embeddings = EMBEDDINGS

    __init__ = estimator_init(
        {
            "members": 16,
            "rank": 2,
            "init_scale": 4.0,
            "layer": "lome",
            "n_blocks": 2,
            "d_block": 128,
            "dropout": 0.1,
            **TRAINING_DEFAULTS,
            "max_epochs": 200,  # the sixth round (regressor) and the fourteenth (classifier): TabM's cap
            "patience": 24,  # the tenth round (classifier) and the ninth (regressor)
            "n_networks": 3,
        }
    )

    def _validate_model_params(self) -> None:
        check_int(self.rank, name="rank", minimum=1)
        check_real(self.init_scale, "init_scale", low=0.0, low_open=False)
        check_choice(self.layer, LAYERS, name="layer")
        check_int(self.n_blocks, name="n_blocks", minimum=1)
        check_int(self.d_block, name="d_block", minimum=1)
        check_real(self.dropout, "dropout", low=0.0, low_open=False, high=1.0)
        check_int(self.d_embedding, name="d_embedding", minimum=1)
        if not self._regression:
            check_choice(self.monitor, MONITORS, name="monitor")
            check_choice(self.calibration, CALIBRATIONS, name="calibration")

    def _network_options(self) -> dict[str, Any]:
        return {"layer": self.layer, "rank": int(self.rank), "init_scale": float(self.init_scale)}

    @classmethod
    def _network(cls, config: dict[str, Any], bins: list[torch.Tensor] | None) -> LoMETabModel:
        return LoMETabModel(**config, bins=bins)


_PARAMS_DOC = """
    Hyper-parameters (keyword-only; ``__init__`` only stores them, ``fit`` validates and names a bad one):
        n_networks (classifier 3, regressor 5): independently seeded networks trained one after
            another (each its own initialisation, batch order and early stopping) whose members are
            pooled — the fitted estimator has ``n_networks · members`` members and costs
            ``n_networks`` fits. Three was chosen over 1 and 2 by mean validation rank across the 12
            benchmark tables, 3 seeds, against the field below (``scripts/check_lometab_bagging.py``;
            docs/results/tabular_bench.md, fifth round); the regressor's five over three by nested
            validation RMSE over six regression tables × three splits (sixteenth round).
        members (16), n_blocks (2), d_block (128), max_epochs (200), patience (24): the shape and
            budget, chosen over the
            estimators' former full-size defaults (K 32, 3 × 256, ≤ 200 epochs, patience 16) by
            mean validation rank across the 12 benchmark tables, 3 seeds, against official TabM at
            its own defaults, XGBoost and CatBoost (``docs/results/tabular_bench.md``, third round); about 9× cheaper to fit. The
            cap is 200 (official TabM's; the third round's was 80): at 80, every concrete network of
            split seed 1 was stopped by the cap while its validation RMSE was still falling (best
            epochs 69–78; sixth round, the regressor), and every hpc network of the classifier ran to
            the cap with a late best epoch (fourteenth round: 200 won hpc's validation cells and
            changed no fit on the other eight tables). Early stopping ends a fit that no longer
            improves, so the higher cap costs only where training still helps. Both wait 24 epochs (the third round's 12, raised
            for the regressor in the ninth round — better on 10 of 18 validation cells over six
            regression tables × three splits, identical on 8 — and for the classifier in the tenth:
            over 9 tables × 3 splits its mean validation rank was 1.44 vs 1.56 on accuracy and 1.54
            vs 1.46 on log-loss, 1.49 vs 1.51 together — a hair's margin).
        rank (2), init_scale (4.0): LoMETab's adapter rank r and σ_init (std of the residual
            ``A_k B_kᵀ`` entries at init) — the diversity axes; chosen by mean validation rank
            across 12 benchmark tables (see the module docstring).
        layer ("lome"): ``"lome"``, ``"additive"``, ``"batchensemble"`` (TabM-like, the project's own
            layer; the official TabM is :class:`ensemblize.tabular.TabMClassifier`), ``"plain"``
            (shared MLP; with ``members=1`` the MLP baseline) or ``"independent"`` (deep ensemble).
        dropout (classifier 0.1, regressor 0.0): the MLP's dropout. Chosen per task
            on validation over 3 seeds (see the module docstring): TabM's 0.1 for classification,
            none for regression.
        monitor ("accuracy" | "log_loss"): the classifier's early-stopping score on validation — the
            ensemble's accuracy (NLL breaking ties, TabM's rule) or its NLL. Classifier only: the
            regressor always monitors the RMSE and has no ``monitor`` (passing one is a TypeError).
        calibration ("none" | "temperature"): a classifier's post-hoc calibration. ``"temperature"``
            fits one temperature ``T`` on the validation split after training (``eval_set``, else the
            held-out ``val_fraction``): ``T = argmin_T NLL(mean_k softmax(z_k / T))``; every member
            probability becomes ``softmax(z_k / T)`` (fitted ``temperature_``). It changes log-loss and
            calibration, and labels only where averaging the rescaled members moves an argmax.
            Classifier only. Not the default: cross-fitted on the validation splits of the 9
            benchmark classification tables (``scripts/check_lometab_temperature.py``) the fitted
            ``T`` was 0.90–1.26 and the log-loss moved by −0.004…+0.004 (lower on 6 of 9, mean rank
            against the field unchanged) — the default ensemble is already close to calibrated there.
        embedding ("piecewise"), n_bins (48), bin_method ("quantile" | "tree"), d_embedding (16):
            numeric feature embeddings.
        lr (2e-3), weight_decay (3e-4), batch_size ("auto": up to 10k training rows 256 for the
            classifier, 128 for the regressor; 512 up to 50k; 1024 above),
        per_member_batches (False), val_fraction (0.2): training.
        lr_schedule ("constant" | "plateau"): a constant learning rate (TabM's), or one multiplied by
            0.3 after every ``max(1, patience // 3)`` epochs without a better validation score
            (patience 24: after 8 and 16 stalled epochs; early stopping after 24). Not the default:
            it ranked last of four settings on validation in the ninth round (module docstring).
        ema_decay (classifier 0.999, regressor None): a decay in ``(0, 1)`` keeps an exponential moving
            average of the weights (warm-up ``min(ema_decay, (1 + t) / (10 + t))`` at step ``t``:
            on the benchmark tables roughly the last tenth of the steps) that validation, early
            stopping and the fitted network use (:mod:`ensemblize.training.averaging`); ``None``
            trains and early-stops on the raw weights (TabM's recipe). Chosen per task in the
            thirteenth round (module docstring): it improved the classifier's validation log-loss
            rank over 27 cells (1.33 vs 1.67) at some accuracy rank (1.61 vs 1.39), and lost the
            regressor's screen (1.67 vs 1.33).
        refit_full (classifier False, regressor True; fifteenth round): after early stopping has
            chosen each network's epoch count on the validation rows, retrain every network from its
            initial weights on the training + validation rows for that many epochs (no validation;
            ``refit_epochs_``). The fitted networks then see ``1 + n_val / n_train`` times the rows —
            most useful on small tables — at about 1.7x the CPU (the fifteenth round's fits); ``best_score_`` / ``history_`` still describe the validation
            fit, which the refitted networks no longer leave unseen. With ``lr_schedule="plateau"``
            the refit replays each network's recorded per-epoch learning rates (the cuts its
            validation fit made).
        impute (True): numeric NaN -> training median plus a missing-indicator feature, categorical
            NaN -> its own category; ``False`` makes any NaN a ValueError naming the columns.
        random_state (None; or an int in [0, 2**32 - 1], or a RandomState), device ("cpu"),
        verbose (False).
"""


class LoMETabClassifier(EnsembleClassifierMixin, _LoMETabBase):
    __doc__ = (
        """LoMETab classifier: K members of a rank-r multiplicative MLP ensemble, averaged on probabilities.
"""
        + _PARAMS_DOC
        + """
    ``predict_members(X)`` -> member probabilities ``(N, K, C)``; ``predict_proba(X)`` -> their mean
    ``(N, C)`` float64 (columns in ``classes_`` order); ``predict(X)`` -> labels ``(N,)``;
    ``predict_uncertainty(X)`` -> total / expected entropy and mutual information per row.
    """
    )

    # ema_decay 0.999: the thirteenth round's validation choice for the classifier (module docstring);
    # the regressor's screen rejected it and keeps TabM's raw weights (None)
    __init__ = estimator_init(
        {**signature_defaults(_LoMETabBase), "monitor": "accuracy", "calibration": "none", "ema_decay": 0.999}
    )

    def _monitor(self) -> str:
        return self.monitor

    def _calibration(self) -> str:
        return self.calibration


class LoMETabRegressor(EnsembleRegressorMixin, _LoMETabBase):
    __doc__ = (
        """LoMETab regressor: K members trained with MSE on the standardised target, averaged.
"""
        + _PARAMS_DOC
        + """
    ``predict_members(X)`` -> member predictions in target units ``(N, K)``; ``predict(X)`` -> their
    mean ``(N,)``; ``predict_uncertainty(X)`` -> mean and member std per row.
    """
    )

    # dropout 0: the regression tables' 3-seed validation rank (module docstring); max_epochs (200) and
    # patience (24) are the shared ones (the sixth and ninth rounds chose them for regression)
    # refit_full: the fifteenth round's nested validation choice; n_networks 5: the sixteenth's (module docstring)
    __init__ = estimator_init(
        {**signature_defaults(_LoMETabBase), "dropout": 0.0, "refit_full": True, "n_networks": 5}
    )
    # files written before the regressor lost its unused ``monitor`` hold one: load drops it
    _retired_params: ClassVar[tuple[str, ...]] = ("monitor",)
    # batch_size="auto" is 128 (not TabM's 256) up to 10k training rows: the seventh round's
    # validation choice over six regression tables x three splits (module docstring)
    _small_auto_batch = 128
