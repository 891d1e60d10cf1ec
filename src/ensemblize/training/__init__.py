"""Training: one loop for every model in the library (:func:`fit`, :func:`predict`).

``fit`` trains any module whose forward returns member outputs ``(B, M, C)`` (or ``(B, C)``, one
member) with SGD or AdamW, a cosine or step schedule, early stopping on the validation NLL of
``p̄ = mean_m softmax(z_m)``, atomic safetensors + JSON checkpoints with bitwise-exact resume, a
tqdm progress bar, and DistributedDataParallel under ``torchrun`` (see
:mod:`ensemblize.training.distributed`).
"""

from .fit import FitResult, fit, member_cross_entropy, predict, seed_everything

__all__ = ["fit", "predict", "FitResult", "seed_everything", "member_cross_entropy"]
