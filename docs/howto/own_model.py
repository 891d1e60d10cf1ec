"""How-to: your own PyTorch model → σN-Ens → fit → uncertainty → save / load.

Run it:  python docs/howto/own_model.py           (about a minute on one CPU thread)
         python docs/howto/own_model.py --small   (a few seconds; what the test suite runs)

1. Write (or take) any ``nn.Module`` with BatchNorm / LayerNorm / GroupNorm layers.
2. ``ez.sigma_ensemble(model, members=4)`` returns a NEW module whose norm layers are per-member
   σNorm layers; every other weight is shared. It maps ``(B, ...)`` to ``(B, M, classes)``.
3. ``ez.training.fit`` trains it; the softmax-temperature regulariser spreads the members.
4. ``ez.training.predict`` gives member probabilities ``(N, M, C)``: average them for the
   prediction, and read uncertainty from the spread (mutual information) or the max probability.
5. ``ez.save_ensemble`` / ``ez.load_ensemble`` write and read safetensors + JSON (no pickle).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import torch
from torch import nn

import ensemblize as ez
from ensemblize.data.images import load_digits

#: Public names this how-to needs (the test suite checks they exist before running it).
REQUIRES = (
    "ensemblize.sigma_ensemble",
    "ensemblize.training.fit",
    "ensemblize.training.predict",
    "ensemblize.save_ensemble",
    "ensemblize.load_ensemble",
)


class SmallConvNet(nn.Module):
    """Your model: nothing ensemblize-specific in it. (B, 1, 8, 8) -> (B, 10) logits."""

    def __init__(self, width: int = 32, classes: int = 10) -> None:
        super().__init__()
        self.features = nn.Sequential(
            nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
            nn.AdaptiveAvgPool2d(1), nn.Flatten(),
        )  # fmt: skip
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.features(x))


def main(small: bool = False) -> dict[str, float]:
    torch.set_num_threads(1)  # small models: one thread is fastest, and many threads oversubscribe
    torch.manual_seed(0)
    data = load_digits(seed=0)  # 1,797 real 8×8 digits, split 65/15/20, normalised
    epochs = 4 if small else 15

    # 1–2. your model, then its σN ensemble (the original `model` is left untouched)
    model = SmallConvNet(width=16 if small else 32)
    ensemble = ez.sigma_ensemble(model, members=4, seed=0)

    # 3. fit: plain (X, y) tensors; the regulariser is optional (λ = 0 turns it off)
    result = ez.training.fit(
        ensemble,
        (data.x_train, data.y_train),
        (data.x_val, data.y_val),
        epochs=epochs,
        optimizer="adamw",
        lr=1e-2,
        regularizer=lambda m: ez.diversity.softmax_temperature_loss(m, tau=5.0, lam=0.5),
        seed=0,
    )
    print(f"trained {epochs} epochs; best validation epoch {result.best_epoch}")

    # 4. uncertainty: member probabilities (N, M, C)
    probs = ez.training.predict(ensemble, data.x_test)
    mean = probs.mean(dim=1)  # p̄: the ensemble's prediction
    confidence = mean.max(dim=1).values  # max p̄
    mi = ez.metrics.mutual_information_per_sample(probs)  # member disagreement, per sample
    y = data.y_test
    out = {
        "accuracy": ez.metrics.accuracy(probs, y),
        "ece": ez.metrics.ece(probs, y),
        "nll": ez.metrics.nll(probs, y),
        "mean_mi": float(mi.mean()),
    }
    print("test: " + ", ".join(f"{k} {v:.4f}" for k, v in out.items()))
    wrong = mean.argmax(dim=1) != y
    print(
        f"mean confidence: {confidence[~wrong].mean():.3f} on right answers, {confidence[wrong].mean():.3f} on wrong ones"
    )
    most_uncertain = torch.argsort(mi, descending=True)[:5]
    print(f"most uncertain test samples (by mutual information): {most_uncertain.tolist()}")

    # 5. save and load: the loaded ensemble predicts exactly the same probabilities
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "digits_sigma"
        ez.save_ensemble(ensemble, path)
        loaded = ez.load_ensemble(path, SmallConvNet(width=16 if small else 32))
        again = ez.training.predict(loaded, data.x_test)
    assert torch.equal(again, probs), "the loaded ensemble must reproduce the saved one bitwise"
    print("saved and loaded: identical predictions")
    return out


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few seconds instead of a minute")
    main(small=parser.parse_args().small)
