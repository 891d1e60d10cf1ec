"""Training: one loop for every model in the library (:func:`fit`) and one prediction loop (:func:`predict`).

Modules, one job each:

* :mod:`.setup` — option checks and the probe that resolves a run before its first epoch;
* :mod:`.fit` — :func:`fit`, the epoch loop (SGD/AdamW, schedules, early stopping on the ensemble's
  validation score, per-member batches, checkpoints with bitwise-exact resume, progress);
* :mod:`.predict` — :func:`predict` (member probabilities / predictions) and :func:`predict_outputs`
  (any per-batch ``transform`` of the raw output), batched and no-grad, DDP-sharded;
* :mod:`.data` — every accepted data form (tensors, dict batches, Datasets, DataLoaders), batch
  cutting, row orders, the data fingerprint;
* :mod:`.outputs` — finding the logits in a model output; member losses and their reduction;
* :mod:`.optim` — weight-decay parameter groups, optimisers, learning-rate schedules;
* :mod:`.averaging` — the exponential moving average of the weights (``fit(ema_decay=...)``);
* :mod:`.validation` — the ensemble's validation scores and the monitored key;
* :mod:`.resume`, :mod:`.state` — checkpoints: configuration fingerprint, pickle-free state;
* :mod:`.progress` — a tqdm.auto bar or one line per step;
* :mod:`.distributed` — torchrun / DistributedDataParallel helpers.
"""

from .fit import FitResult, fit, seed_everything
from .optim import parameter_groups
from .outputs import logits_of, member_cross_entropy, member_mse
from .predict import predict, predict_outputs

__all__ = [
    "fit",
    "predict",
    "predict_outputs",
    "FitResult",
    "seed_everything",
    "member_cross_entropy",
    "member_mse",
    "logits_of",
    "parameter_groups",
]
