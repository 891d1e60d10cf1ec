"""Compatibility path: temperature scaling lives in :mod:`ensemblize.models.temperature_scaling`.

Kept so that ``from ensemblize.calibration import TemperatureScaled, fit_temperature`` (runner.py,
older scripts) keeps working; new code imports from ``ensemblize.models.temperature_scaling``.
Calibration *metrics* (ECE, reliability, NLL, Brier) are in :mod:`ensemblize.metrics.calibration`.
"""

from __future__ import annotations

from .models.temperature_scaling import TemperatureScaled, fit_temperature

__all__ = ["fit_temperature", "TemperatureScaled"]
