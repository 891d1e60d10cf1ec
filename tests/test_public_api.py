"""Every public name of DESIGN.md resolves, and the lazy maps point at real objects."""

import importlib

import pytest

import ensemblize as ez

DESIGN_NAMES = {
    "": ["sigma_ensemble"],
    "nn": [
        "SigmaBatchNorm1d",
        "SigmaBatchNorm2d",
        "SigmaLayerNorm",
        "LoMELinear",
        "AdditiveLowRankLinear",
        "BatchEnsembleLinear",
        "BatchEnsembleConv2d",
        "PackedLinear",
        "PackedConv2d",
    ],
    "diversity": ["softmax_temperature_loss", "sharing"],
    "metrics": [
        "accuracy",
        "nll",
        "brier",
        "ece",
        "reliability",
        "ood_auroc",
        "ood_aupr",
        "fpr_at_tpr",
        "risk_coverage",
        "aurc",
        "eaurc",
        "augrc",
        "risk_at_coverage",
        "coverage_at_risk",
        "disagreement",
        "pairwise_kl",
        "mutual_information",
        "ambiguity",
    ],
    "tabular": ["LoMETabClassifier", "LoMETabRegressor"],
    "selective": [
        "SelectiveNet",
        "SelectiveNetLoss",
        "SyncLoss",
        "DeepGamblersLoss",
        "softmax_response",
        "softmax_power",
        "negative_entropy",
        "threshold_for_coverage",
    ],
    "data": ["corrupt"],
    # one home per job (issue 9): the σN package and the confidence scores
    "sigma": [
        "sigma_ensemble",
        "sigma_layers",
        "softmax_temperature_loss",
        "sharing",
        "convert_norms",
        "optimal_owners",
    ],
    "metrics.confidence": [
        "softmax_response",
        "softmax_power",
        "negative_entropy",
        "deep_gamblers_confidence",
    ],
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in DESIGN_NAMES.items() for n in names])
def test_design_names_resolve(module, name):
    obj = getattr(importlib.import_module(f"ensemblize.{module}") if module else ez, name)
    assert callable(obj) and obj.__doc__, f"{module}.{name} needs a docstring"


@pytest.mark.parametrize(
    "package",
    [
        "ensemblize",
        "ensemblize.nn",
        "ensemblize.models",
        "ensemblize.data",
        "ensemblize.tabular",
        "ensemblize.sigma",
    ],
)
def test_every_lazy_name_resolves(package):
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError, match="no attribute"):
        mod.__getattr__("does_not_exist")


def test_each_job_has_one_home():
    """Contract paths and compatibility paths resolve to the same objects as their one definition."""
    from ensemblize import calibration, convert, diversity, sigma
    from ensemblize.metrics import confidence
    from ensemblize.models import temperature_scaling

    assert ez.sigma_ensemble is convert.sigma_ensemble is sigma.sigma_ensemble
    assert diversity.softmax_temperature_loss is sigma.softmax_temperature_loss
    assert diversity.sharing is sigma.sharing and diversity.sigma_layers is sigma.sigma_layers
    assert ez.selective.negative_entropy is ez.metrics.negative_entropy is confidence.negative_entropy
    assert calibration.fit_temperature is temperature_scaling.fit_temperature
