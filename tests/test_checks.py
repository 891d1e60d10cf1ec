"""The shared validators of ``ensemblize._checks`` that data and experiment code rely on."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from ensemblize._checks import check_choice, check_instance, check_int, check_size


def test_check_instance_returns_the_value_or_names_the_type():
    path = Path("x")
    assert check_instance(path, (bool, str, os.PathLike), name="cache") is path
    with pytest.raises(TypeError, match="^setup must be an ImageSetup, got dict$"):
        check_instance({}, type("ImageSetup", (), {}), name="setup")
    with pytest.raises(TypeError, match="^n must be an int or float, got str$"):
        check_instance("3", (int, float), name="n")
    with pytest.raises(TypeError, match="^cache must be a bool or a folder path, got int$"):
        check_instance(3, (bool, str, os.PathLike), name="cache", what="a bool or a folder path")


def test_int_checks_accept_numpy_ints_and_name_the_bad_value():
    assert check_size(np.int64(3), name="severity", minimum=0, maximum=5) == 3
    with pytest.raises(ValueError, match="^severity must be <= 5, got 6$"):
        check_size(6, name="severity", minimum=0, maximum=5)
    with pytest.raises(TypeError, match=r"^seed must be an int >= 0, got 2\.5 \(float\)$"):
        check_int(2.5, name="seed", minimum=0)
    with pytest.raises(ValueError, match=r"^dataset must be one of \('a', 'b'\), got 'c'$"):
        check_choice("c", ("a", "b"), name="dataset")
