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
}


@pytest.mark.parametrize(("module", "name"), [(m, n) for m, names in DESIGN_NAMES.items() for n in names])
def test_design_names_resolve(module, name):
    obj = getattr(getattr(ez, module) if module else ez, name)
    assert callable(obj) and obj.__doc__, f"{module}.{name} needs a docstring"


@pytest.mark.parametrize(
    "package", ["ensemblize", "ensemblize.nn", "ensemblize.models", "ensemblize.data", "ensemblize.tabular"]
)
def test_every_lazy_name_resolves(package):
    mod = importlib.import_module(package)
    for name in mod.__all__:
        assert getattr(mod, name) is not None, f"{package}.{name}"
    with pytest.raises(AttributeError, match="no attribute"):
        mod.__getattr__("does_not_exist")
