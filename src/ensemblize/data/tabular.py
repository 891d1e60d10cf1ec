"""Compatibility re-exports: the tables and split protocol now live in :mod:`ensemblize.data.tables`,
preprocessing in :mod:`ensemblize.data.table_preprocessing`, and :func:`evaluate_predictions` in
:mod:`ensemblize.evaluation.tabular`. Import from those modules; this one keeps old imports working.
"""

from __future__ import annotations

from ensemblize.data.table_preprocessing import (
    MISSING_CATEGORY,
    IdentifierColumnWarning,
    PreparedTable,
    TabularPreprocessor,
    prepare,
    quantile_normal_transform,
)
from ensemblize.data.tables import (
    BENCHMARK_SUITE,
    BENCHMARK_TABLES,
    SKLEARN_TABLES,
    TASKS,
    TableSpec,
    TableSplits,
    TabularDataset,
    detect_column_types,
    list_tables,
    load_benchmark,
    load_table,
    split,
    split_sizes,
)
from ensemblize.evaluation.tabular import evaluate_predictions

__all__ = [
    "TASKS",
    "TabularDataset",
    "TableSpec",
    "TableSplits",
    "PreparedTable",
    "TabularPreprocessor",
    "IdentifierColumnWarning",
    "MISSING_CATEGORY",
    "BENCHMARK_TABLES",
    "BENCHMARK_SUITE",
    "SKLEARN_TABLES",
    "load_table",
    "load_benchmark",
    "list_tables",
    "detect_column_types",
    "split",
    "split_sizes",
    "prepare",
    "evaluate_predictions",
    "quantile_normal_transform",
]
