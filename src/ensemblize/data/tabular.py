"""Compatibility re-exports: the tables and split protocol now live in :mod:`ensemblize.data.tables`,
preprocessing in :mod:`ensemblize.data.table_preprocessing` (test metrics are in
:mod:`ensemblize.evaluation.tabular`: ``data/`` holds no metrics). This one keeps old imports working.
"""

from __future__ import annotations

from ensemblize.data import table_preprocessing as _preprocessing
from ensemblize.data import tables as _tables
from ensemblize.data.table_preprocessing import *  # noqa: F403
from ensemblize.data.tables import *  # noqa: F403

__all__ = [*_tables.__all__, *_preprocessing.__all__]
