"""A success rate is a proportion: its interval is Wilson's score interval over the episodes, within [0, 1]."""

from __future__ import annotations

import math

import pytest

from simbackend.errors import InvalidArgumentError
from simbackend.training import EvalResult, merge_seeds
from simbackend.training.stats import wilson


def _seed_result(seed: int, success_rate: float, episodes: int = 16) -> EvalResult:
    row = {"seed": seed, "mean_return": 10.0 + seed, "success_rate": success_rate, "mean_length": 50.0, "wall_s": 1.0}
    return EvalResult("cartpole", "mujoco", "mujoco", "ckpt.pt", 1, 100, (seed,), episodes, episodes, per_seed=[row])


def test_wilson_known_numbers() -> None:
    # 8 of 10 at 95 %: (0.4902, 0.9433) (Wilson 1927; Newcombe 1998, table I)
    e = wilson(8, 10)
    assert e.mean == 0.8 and e.n == 10 and e.method == "wilson"
    assert (e.low, e.high) == pytest.approx((0.4902, 0.9433), abs=1e-4)
    assert e.half_width == pytest.approx((e.high - e.low) / 2)
    assert e.to_dict()["ci_low"] == pytest.approx(0.4902, abs=1e-4) and e.to_dict()["method"] == "wilson"


@pytest.mark.parametrize("successes,trials", [(0, 1), (1, 1), (0, 48), (48, 48), (1, 48), (47, 48), (0, 3), (3, 3)])
def test_wilson_stays_in_zero_one_and_holds_the_rate(successes: int, trials: int) -> None:
    e = wilson(successes, trials)
    assert 0.0 <= e.low <= e.mean <= e.high <= 1.0
    assert e.high - e.low > 0  # never a point, not even at 0 or all successes, nor for one episode
    assert (e.low == 0.0) == (successes == 0) and (e.high == 1.0) == (successes == trials)
    assert math.isnan(e.std) == (trials == 1)


def test_wilson_of_no_success_in_one_episode_reads_the_whole_range_but_one_side() -> None:
    e = wilson(0, 1)  # z^2 / (1 + z^2) = 0.7935 at 95 %
    assert (e.low, e.high) == pytest.approx((0.0, 0.7935), abs=1e-4)


@pytest.mark.parametrize(
    "successes,trials,argument", [(-1, 4, "successes"), (5, 4, "successes"), (0, 0, "trials"), (1.0, 4, "successes")]
)
def test_wilson_refuses_bad_counts(successes: object, trials: object, argument: str) -> None:
    with pytest.raises(Exception, match=argument):
        wilson(successes, trials)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="confidence"):
        wilson(1, 2, confidence=1.0)


def test_an_evaluations_success_interval_stays_in_zero_one() -> None:
    """Seeds at 0, 0 and 1/16 success: the t interval over seeds read [-0.0688, 0.1105]."""
    merged = merge_seeds([_seed_result(100, 0.0), _seed_result(101, 0.0), _seed_result(102, 1 / 16)])
    rate = merged.success_rate
    assert rate.mean == pytest.approx(1 / 48) and rate.n == 48  # one success in 48 episodes
    assert 0.0 < rate.low < rate.mean < rate.high < 1.0
    assert (rate.low, rate.high) == pytest.approx(wilson(1, 48).bounds)
    assert merged.to_dict()["success_rate"]["ci_low"] >= 0.0 and "Wilson" in merged.to_dict()["ci"]
    # the other figures keep Student's t over seeds
    assert merged.mean_return.method == "student-t" and merged.mean_return.n == 3


@pytest.mark.parametrize("rates", [(1.0, 1.0, 1.0), (0.0, 0.0, 0.0), (1.0,), (0.0,)])
def test_all_or_no_successes_and_one_seed_have_an_interval(rates: tuple[float, ...]) -> None:
    merged = merge_seeds([_seed_result(100 + i, r, episodes=1) for i, r in enumerate(rates)])
    rate = merged.success_rate
    assert rate.mean == rates[0] and rate.n == len(rates)
    assert 0.0 <= rate.low < rate.high <= 1.0 and rate.low <= rate.mean <= rate.high
