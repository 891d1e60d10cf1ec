"""How-to: selective prediction at a target coverage, with the threshold chosen on validation.

Run it:  python docs/howto/selective_prediction.py           (about a minute on one CPU thread)
         python docs/howto/selective_prediction.py --small   (a few seconds; what the test suite runs)

A selective classifier answers only when it is confident enough and abstains otherwise. The
recipe:

1. train any classifier (here a σN ensemble of a small CNN; a single model works the same way);
2. score every sample with a confidence — the max ensemble probability (softmax response,
   ``ez.metrics.softmax_response``), or ``-mutual information`` for member disagreement;
3. choose the threshold on the VALIDATION split: ``ez.selective.threshold_for_coverage(conf_val, c)``
   is the largest ``t`` that accepts at least a share ``c`` of the validation samples;
4. on new data accept ``confidence >= t``; measure the coverage you actually got
   (``ez.selective.coverage_achieved``) and the error rate among accepted samples (selective risk).

Choosing ``t`` on the test set would overstate the result; on validation, test coverage lands
near the target, not exactly on it. To train the model for one coverage (SelectiveNet, SYNC), see
``ensemblize experiment selective``.
"""

from __future__ import annotations

import argparse

import torch
from torch import nn

import ensemblize as ez
from ensemblize.data.images import load_digits

#: Public names this how-to needs (the test suite checks they exist before running it).
REQUIRES = (
    "ensemblize.sigma_ensemble",
    "ensemblize.training.fit",
    "ensemblize.training.predict",
    "ensemblize.metrics.softmax_response",
    "ensemblize.selective.threshold_for_coverage",
    "ensemblize.selective.coverage_achieved",
)


def small_cnn(width: int) -> nn.Module:
    return nn.Sequential(
        nn.Conv2d(1, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.Conv2d(width, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(width, 10),
    )  # fmt: skip


def main(
    small: bool = False, coverages: tuple[float, ...] = (0.5, 0.8, 0.9)
) -> dict[float, dict[str, float]]:
    torch.set_num_threads(1)
    torch.manual_seed(0)
    data = load_digits(seed=0)
    model = ez.sigma_ensemble(small_cnn(16 if small else 32), members=4, seed=0)
    ez.training.fit(
        model, (data.x_train, data.y_train), (data.x_val, data.y_val),
        epochs=4 if small else 15, optimizer="adamw", lr=1e-2, seed=0,
    )  # fmt: skip

    conf_val = ez.metrics.softmax_response(ez.training.predict(model, data.x_val))  # max p̄, (N_val,)
    probs_test = ez.training.predict(model, data.x_test)
    conf_test = ez.metrics.softmax_response(probs_test)
    wrong = (probs_test.mean(dim=1).argmax(dim=1) != data.y_test).double()
    print(f"answering everything: error rate {wrong.mean():.3f} on {len(wrong)} test images")

    results = {}
    for c in coverages:
        t = ez.selective.threshold_for_coverage(conf_val, c)  # chosen on validation only
        accept = conf_test >= t
        got = ez.selective.coverage_achieved(conf_test, t)
        risk = float(wrong[accept].mean()) if accept.any() else float("nan")
        results[c] = {"threshold": t, "coverage": got, "risk": risk}
        print(
            f"target coverage {c:.0%}: threshold {t:.3f} -> test coverage {got:.1%}, error rate among accepted {risk:.3f}"
        )
    aurc = ez.metrics.aurc(conf_test.numpy(), wrong.numpy())
    print(f"AURC (area under the whole risk–coverage curve, lower is better): {aurc:.4f}")
    return results


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", action="store_true", help="a few seconds instead of a minute")
    main(small=parser.parse_args().small)
