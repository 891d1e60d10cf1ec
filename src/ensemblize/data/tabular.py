"""Compatibility re-exports: the tables and split protocol now live in :mod:`ensemblize.data.tables`,
preprocessing in :mod:`ensemblize.data.table_preprocessing`, and :func:`evaluate_predictions` in
:mod:`ensemblize.evaluation.tabular`. Import from those modules; this one keeps old imports working.
"""

from __future__ import annotations

from ensemblize.data import table_preprocessing as _preprocessing
from ensemblize.data import tables as _tables
from ensemblize.data.table_preprocessing import *  # noqa: F403
from ensemblize.data.tables import *  # noqa: F403
from ensemblize.evaluation.tabular import evaluate_predictions

__all__ = [*_tables.__all__, *_preprocessing.__all__, "evaluate_predictions"]
