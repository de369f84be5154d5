"""simbackend.checks: the one home of scalar argument checks, so the same mistake reads the same everywhere."""

from __future__ import annotations

import math

import numpy as np
import pytest

from simbackend import checks
from simbackend.errors import ArgumentTypeError, InvalidArgumentError, ScalarTypeError


@pytest.mark.parametrize("value", [1.5, True, np.bool_(True), "2", None, 2.0])
def test_integer_refuses_other_types_as_both_type_and_value_errors(value) -> None:
    with pytest.raises(ScalarTypeError, match=r"^nsteps: expected an integer >= 1, got \w+ ") as e:
        checks.integer(value, "nsteps", minimum=1)
    assert isinstance(e.value, ArgumentTypeError) and isinstance(e.value, InvalidArgumentError)
    assert isinstance(e.value, TypeError) and isinstance(e.value, ValueError)


def test_integer_ranges_numpy_scalars_and_none() -> None:
    assert checks.integer(np.int64(3), "n", minimum=1) == 3 and type(checks.integer(np.int32(3), "n")) is int
    assert checks.integer(None, "total", minimum=0, allow_none=True) is None
    with pytest.raises(InvalidArgumentError, match=r"^k: expected an integer in \[1, 100\], got 101$"):
        checks.integer(101, "k", minimum=1, maximum=100)
    with pytest.raises(InvalidArgumentError, match=r"^k: expected an integer >= 0 or None, got -1$"):
        checks.integer(-1, "k", minimum=0, allow_none=True)
    with pytest.raises(ScalarTypeError, match="k: expected an integer, got NoneType None"):
        checks.integer(None, "k")


@pytest.mark.parametrize("value", [math.nan, math.inf, -math.inf, 0.0, -1])
def test_real_refuses_non_finite_and_out_of_range(value) -> None:
    with pytest.raises(InvalidArgumentError, match=r"^fps: expected a finite number > 0, got "):
        checks.real(value, "fps", minimum=0.0, above=True)


def test_real_accepts_ints_and_numpy_and_closed_bounds() -> None:
    assert checks.real(np.float32(0.5), "x", minimum=0.0, maximum=1.0) == 0.5
    assert checks.real(1, "x", minimum=0.0, maximum=1.0) == 1.0 and checks.real(0, "x", minimum=0.0) == 0.0
    assert checks.real(None, "x", allow_none=True) is None
    with pytest.raises(InvalidArgumentError, match=r"^x: expected a finite number in \(0, 1\], got 0$"):
        checks.real(0, "x", minimum=0.0, maximum=1.0, above=True)
    with pytest.raises(ScalarTypeError, match="x: expected a finite number, got bool True"):
        checks.real(True, "x")
    with pytest.raises(ScalarTypeError, match="x: expected a finite number, got str '1'"):
        checks.real("1", "x")


def test_boolean_and_choice() -> None:
    assert checks.boolean(np.bool_(False), "flag") is False
    for v in (0, 1, "false", None):
        with pytest.raises(ScalarTypeError, match="^flag: expected True or False, got "):
            checks.boolean(v, "flag")
    assert checks.choice("TGS", "solver", ("pgs", "tgs"), case_sensitive=False) == "tgs"
    with pytest.raises(InvalidArgumentError, match=r"^solver: expected one of \['pgs', 'tgs'\], got 'TGS'$"):
        checks.choice("TGS", "solver", ("pgs", "tgs"))


def test_long_values_are_cut_to_one_short_line() -> None:
    with pytest.raises(ScalarTypeError) as e:
        checks.integer("x" * 500, "n")
    assert len(str(e.value)) < 120 and str(e.value).endswith("...")


def test_the_library_entry_points_share_the_checks() -> None:
    """A float where a count belongs reads the same at the contract, a config and a training call."""
    from simbackend.tasks import TaskConfig
    from simbackend.training.stats import t_two_sided_probability

    for call, argument in (
        (lambda: TaskConfig(decimation=2.0), "config.decimation"),
        (lambda: t_two_sided_probability(1.0, 2.0), "df"),
    ):
        with pytest.raises(ScalarTypeError, match=rf"^{argument}: expected an integer >= 1, got float 2.0$"):
            call()
