"""Temperature scaling (a baseline, in models/): the fitted T minimises the validation NLL; bad input is named."""

import numpy as np
import pytest
import torch

from ensemblize import calibration
from ensemblize.models.temperature_scaling import TemperatureScaled, fit_temperature


def _nll(z, y, t):
    logp = torch.logsumexp(torch.log_softmax(z / t, -1), dim=1) - np.log(z.shape[1])
    return float(-logp[torch.arange(len(y)), y].mean())


@pytest.mark.parametrize("members", [1, 3])
def test_fitted_temperature_is_the_grid_minimiser_of_the_nll(members):
    gen = torch.Generator().manual_seed(0)
    z = torch.randn(200, members, 4, generator=gen, dtype=torch.float64) * 3
    y = z.mean(1).argmax(1)
    flip = torch.rand(200, generator=gen) < 0.3
    y = torch.where(flip, (y + 1) % 4, y)
    t = fit_temperature(z if members > 1 else z[:, 0], y)
    grid = np.exp(np.linspace(np.log(0.2), np.log(20), 2001))
    best = grid[np.argmin([_nll(z, y, g) for g in grid])]
    assert t == pytest.approx(best, rel=5e-3)
    assert _nll(z, y, t) <= min(_nll(z, y, g) for g in grid) + 1e-9


def test_the_old_import_path_is_the_same_object():
    assert (
        calibration.fit_temperature is fit_temperature and calibration.TemperatureScaled is TemperatureScaled
    )


@pytest.mark.parametrize(
    ("args", "exc", "match"),
    [
        ((np.zeros((3, 2)), torch.zeros(3, dtype=torch.long)), TypeError, "torch.Tensor"),
        ((torch.zeros(3, 2, dtype=torch.long), torch.zeros(3, dtype=torch.long)), TypeError, "floating"),
        ((torch.zeros(0, 2), torch.zeros(0, dtype=torch.long)), ValueError, "N >= 1"),
        ((torch.zeros(3, 2), torch.zeros(4, dtype=torch.long)), ValueError, "matching labels"),
        ((torch.full((3, 2), float("nan")), torch.zeros(3, dtype=torch.long)), ValueError, "non-finite"),
        ((torch.zeros(3, 2), torch.full((3,), 5)), ValueError, "outside"),
    ],
)
def test_fit_temperature_bad_input(args, exc, match):
    with pytest.raises(exc, match=match):
        fit_temperature(*args)


@pytest.mark.parametrize(
    ("t", "exc"), [(0.0, ValueError), (-1, ValueError), (float("nan"), ValueError), ("1", TypeError)]
)
def test_temperature_scaled_rejects_bad_temperature(t, exc):
    with pytest.raises(exc, match="temperature"):
        TemperatureScaled(torch.nn.Identity(), t)


def test_temperature_scaled_divides_logits():
    x = torch.randn(4, 3)
    torch.testing.assert_close(TemperatureScaled(torch.nn.Identity(), 2.0)(x), x / 2)


def test_probabilities_passed_as_logits_are_refused_everywhere_logits_are_expected():
    """fit_temperature(predict(...)) gave T = 0.09 and a test NLL worse than no scaling, silently."""
    import numpy as np

    from ensemblize import metrics
    from ensemblize.models import fit_temperature

    g = torch.Generator().manual_seed(0)
    z = 3 * torch.randn(50, 2, 4, generator=g)
    y = torch.randint(0, 4, (50,), generator=g)
    p = torch.softmax(z, dim=-1)
    with pytest.raises(ValueError, match="look like probabilities"):
        fit_temperature(p, y)
    with pytest.raises(ValueError, match="look like probabilities"):
        metrics.nll(p.numpy(), y.numpy(), from_logits=True)
    with pytest.raises(ValueError, match="look like probabilities"):
        metrics.deep_gamblers_confidence(torch.softmax(z[:, 0], dim=-1))
    # logits and log-probabilities are accepted; log-probabilities give the same NLL as the logits
    assert fit_temperature(z, y) > 0
    a = metrics.nll(z.numpy(), y.numpy(), from_logits=True)
    b = metrics.nll(np.log(p.numpy()), y.numpy(), from_logits=True)
    assert abs(a - b) < 1e-6


def test_half_precision_softmax_rows_are_recognised_as_probabilities():
    """fp16 / bf16 softmax rows miss 1 by up to 2e-3: a 1e-4 tolerance let a bf16 Softmax model through."""
    from ensemblize._checks import looks_like_probabilities

    z = 4 * torch.randn(200, 7, generator=torch.Generator().manual_seed(0))
    for dtype in (torch.float16, torch.bfloat16, torch.float32):
        assert looks_like_probabilities(torch.softmax(z.to(dtype), dim=-1))
        assert not looks_like_probabilities(z.to(dtype))


@pytest.mark.parametrize("scale", [1e-6, 1e-5, 1e-3, 1e3, 1e6])
def test_the_fit_is_the_same_at_every_logit_scale(scale):
    """fit(c·z) = c·fit(z): starting at T = 1, logits of order 1e-5 came back with T = 1 exactly (no fit)."""
    gen = torch.Generator().manual_seed(1)
    z = torch.randn(300, 5, generator=gen, dtype=torch.float64) * 3
    y = z.argmax(1)
    y[:150] = torch.randint(0, 5, (150,), generator=gen)
    base = fit_temperature(z, y)
    assert fit_temperature(z * scale, y) == pytest.approx(scale * base, rel=1e-6)
    grid = np.exp(np.linspace(np.log(base / 2), np.log(base * 2), 4001))
    assert base == pytest.approx(grid[np.argmin([_nll(z[:, None], y, g) for g in grid])], rel=1e-3)


@pytest.mark.parametrize("members", [1, 3])
def test_a_validation_split_every_member_gets_right_has_no_temperature_and_keeps_one(members):
    """The NLL then falls as T -> 0: the fit stopped at an arbitrary T (5e-3, 4e-8), and test NLL went
    from 0.62 to 3.19 with it."""
    gen = torch.Generator().manual_seed(2)
    z = torch.randn(40, members, 3, generator=gen) * 2
    y = z[:, 0].argmax(1)
    z[torch.arange(40), :, y] += 10.0  # every member right on every row
    with pytest.warns(UserWarning, match="classified correctly.*returning T = 1"):
        assert fit_temperature(z if members > 1 else z[:, 0], y) == 1.0


def test_equal_logits_keep_temperature_one():
    assert fit_temperature(torch.zeros(4, 3), torch.tensor([0, 1, 2, 0])) == 1.0
