"""The eval's statistics: exact McNemar p-values against textbook values and an independent
computation, a reproducible bootstrap interval that behaves like one, and the small helpers."""

from __future__ import annotations

import math
import random
import statistics
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from massgen_mcp.evaluation.stats import (
    Interval,
    PairedTest,
    bootstrap_interval,
    cost_per_correct,
    equal_compute_samples,
    majority,
    mcnemar,
)


def paired(a_only: int, b_only: int, both: int = 0, neither: int = 0) -> tuple[
        list[bool], list[bool]]:
    """Outcomes of methods A and B with the given counts, interleaved so order cannot matter."""
    pairs = ([(True, False)] * a_only + [(False, True)] * b_only + [(True, True)] * both
             + [(False, False)] * neither)
    pairs = pairs[::2] + pairs[1::2]
    return [x for x, _ in pairs], [y for _, y in pairs]


def exact_p_by_likelihood(b: int, c: int) -> float:
    """Two-sided exact binomial p-value computed the other textbook way: the total probability,
    under Binomial(b + c, 1/2), of every split no more likely than the observed one."""
    n = b + c
    observed = Fraction(math.comb(n, b), 2**n)
    return float(min(Fraction(1), sum((Fraction(math.comb(n, i), 2**n) for i in range(n + 1)
                                       if Fraction(math.comb(n, i), 2**n) <= observed),
                                      Fraction(0))))


# --- McNemar ----------------------------------------------------------------------------------

@pytest.mark.parametrize(("b", "c", "expected"), [
    (1, 8, 0.0390625),  # 2 * (1 + 9) / 2**9
    (8, 1, 0.0390625),
    (0, 5, 0.0625),  # 2 / 2**5
    (3, 3, 1.0),  # doubled tail 84/64, capped
    (0, 1, 1.0),
    (0, 6, 0.03125),
    (2, 10, 0.03857421875),  # 2 * (1 + 12 + 66) / 2**12
])
def test_mcnemar_matches_textbook_exact_p_values(b: int, c: int, expected: float) -> None:
    assert mcnemar(*paired(b, c, both=4, neither=2)).p_value == pytest.approx(expected, abs=1e-9)


@pytest.mark.parametrize(("b", "c"), [
    (0, 0), (1, 0), (1, 1), (1, 2), (2, 5), (4, 4), (5, 4), (3, 17), (10, 30), (25, 40),
    (60, 90), (0, 40),
])
def test_mcnemar_p_value_equals_an_independent_exact_computation(b: int, c: int) -> None:
    p = mcnemar(*paired(b, c, both=7, neither=3)).p_value
    assert p == exact_p_by_likelihood(b, c)  # both correctly rounded from the exact fraction
    n = b + c  # and the doubled lower tail, summed by hand
    doubled = 2 * sum(math.comb(n, i) for i in range(min(b, c) + 1)) / 2**n
    assert p == min(1.0, doubled)


@given(st.integers(0, 80), st.integers(0, 80))
@settings(max_examples=60, deadline=None)
def test_mcnemar_p_value_is_symmetric_and_exact(b: int, c: int) -> None:
    p = mcnemar(*paired(b, c)).p_value
    assert p == mcnemar(*paired(c, b)).p_value == exact_p_by_likelihood(b, c)
    assert 0.0 < p <= 1.0


def test_mcnemar_counts_each_kind_of_pair() -> None:
    a = [True, True, False, False, True, False, True]
    b = [True, False, True, False, False, False, True]
    assert mcnemar(a, b) == PairedTest(a_only=2, b_only=1, both=2, neither=2, p_value=1.0)
    swapped = mcnemar(b, a)
    assert (swapped.a_only, swapped.b_only, swapped.both, swapped.neither) == (1, 2, 2, 2)


def test_mcnemar_without_discordant_pairs_is_one() -> None:
    assert mcnemar([], []) == PairedTest(0, 0, 0, 0, 1.0)
    assert mcnemar([True, False, True], [True, False, True]) == PairedTest(0, 0, 2, 1, 1.0)


def test_mcnemar_refuses_unequal_lengths_naming_both() -> None:
    with pytest.raises(ValueError, match=r"a has 3.*b has 2"):
        mcnemar([True, False, True], [True, False])


# --- bootstrap --------------------------------------------------------------------------------

def test_bootstrap_is_reproducible_for_a_seed_and_varies_with_it() -> None:
    outcomes = [i % 3 != 0 for i in range(47)]
    assert bootstrap_interval(outcomes, seed=5) == bootstrap_interval(outcomes, seed=5)
    assert bootstrap_interval(outcomes) == bootstrap_interval(list(outcomes), seed=0)
    assert len({bootstrap_interval(outcomes, seed=s) for s in range(6)}) > 1


def test_bootstrap_of_sixty_in_a_hundred_is_about_ten_points_either_side() -> None:
    outcomes = [True] * 60 + [False] * 40
    interval = bootstrap_interval(outcomes)
    assert 0.48 <= interval.low < 0.6 < interval.high <= 0.72
    assert interval.high - interval.low > 0.15  # about 2 * 1.96 * sqrt(0.24 / 100) = 0.19
    assert interval.low == round(interval.low, 4) and interval.high == round(interval.high, 4)


@pytest.mark.parametrize(("level", "cuts"), [(0.95, 40), (0.9, 20), (0.5, 4)])
def test_bootstrap_bounds_are_the_middle_quantiles_of_the_seeded_resamples(
        level: float, cuts: int) -> None:
    """The specified algorithm, redone here: 2000 resamples drawn by ``random.Random(seed)``,
    their quantiles taken by the standard library (linear interpolation, ``inclusive``)."""
    outcomes = [i % 5 < 3 for i in range(53)]
    rng = random.Random(11)
    means = [sum(rng.choices(outcomes, k=len(outcomes))) / len(outcomes) for _ in range(2000)]
    quantiles = statistics.quantiles(means, n=cuts, method="inclusive")
    interval = bootstrap_interval(outcomes, level=level, seed=11)
    assert interval.low == pytest.approx(quantiles[0], abs=1e-4)
    assert interval.high == pytest.approx(quantiles[-1], abs=1e-4)


def test_bootstrap_of_a_known_resampling_distribution() -> None:
    """Resampling [True, False] gives accuracy 0, 1/2 or 1 with chances 1/4, 1/2, 1/4: the
    middle 95% spans all three, the middle 40% is 1/2 alone."""
    assert bootstrap_interval([True, False]) == Interval(0.0, 1.0)
    assert bootstrap_interval([True, False], level=0.4) == Interval(0.5, 0.5)


def test_bootstrap_widens_with_the_level() -> None:
    outcomes = [i % 4 == 0 for i in range(30)]
    narrow = bootstrap_interval(outcomes, level=0.8)
    wide = bootstrap_interval(outcomes, level=0.99)
    assert wide.low < narrow.low < 0.25 < narrow.high < wide.high


@pytest.mark.parametrize(("outcomes", "expected"), [
    ([True] * 12, Interval(1.0, 1.0)),
    ([False] * 12, Interval(0.0, 0.0)),
    ([True], Interval(1.0, 1.0)),
    ([False], Interval(0.0, 0.0)),
])
def test_bootstrap_of_unanimous_outcomes_is_a_point(
        outcomes: list[bool], expected: Interval) -> None:
    assert bootstrap_interval(outcomes) == expected


@pytest.mark.parametrize("level", [0.0, 1.0, -0.5, 1.5, 95.0, math.nan])
def test_bootstrap_refuses_a_level_outside_zero_to_one(level: float) -> None:
    with pytest.raises(ValueError, match="level"):
        bootstrap_interval([True, False], level=level)


def test_bootstrap_refuses_no_outcomes_and_no_resamples() -> None:
    with pytest.raises(ValueError, match="at least one outcome"):
        bootstrap_interval([])
    with pytest.raises(ValueError, match="resamples"):
        bootstrap_interval([True], resamples=0)


@given(st.lists(st.booleans(), min_size=1, max_size=60), st.integers(0, 2**32))
@settings(max_examples=40, deadline=None)
def test_bootstrap_interval_contains_the_accuracy_within_zero_and_one(
        outcomes: list[bool], seed: int) -> None:
    interval = bootstrap_interval(outcomes, seed=seed)
    accuracy = round(sum(outcomes) / len(outcomes), 4)  # as rounded as the bounds
    assert 0.0 <= interval.low <= accuracy <= interval.high <= 1.0


# --- cost, compute, majority ------------------------------------------------------------------

def test_cost_per_correct() -> None:
    assert cost_per_correct(1.5, 6) == 0.25
    assert cost_per_correct(0.0, 3) == 0.0
    assert cost_per_correct(None, 6) is None
    assert cost_per_correct(1.5, 0) is None
    assert cost_per_correct(None, 0) is None
    with pytest.raises(ValueError, match="negative"):
        cost_per_correct(1.0, -1)


@pytest.mark.parametrize(("mean_calls", "per_sample", "expected"), [
    (7.0, 1.0, 7),
    (6.49, 1.0, 6),
    (6.5, 1.0, 7),  # half up, where round() would give 6
    (2.5, 1.0, 3),  # round() would give 2
    (7.0, 2.0, 4),  # 3.5
    (9.0, 3.0, 3),
    (0.2, 1.0, 1),  # clamped up to at_least
    (0.0, 1.0, 1),
    (1000.0, 1.0, 64),  # clamped down to at_most
    (64.4, 1.0, 64),
])
def test_equal_compute_samples_rounds_half_up_and_clamps(
        mean_calls: float, per_sample: float, expected: int) -> None:
    assert equal_compute_samples(mean_calls, per_sample) == expected


def test_equal_compute_samples_custom_bounds_and_no_parity_adjustment() -> None:
    assert equal_compute_samples(2.0, at_least=3) == 3
    assert equal_compute_samples(20.0, at_most=16) == 16
    assert equal_compute_samples(8.0) == 8  # even stays even


@pytest.mark.parametrize(("args", "kwargs"), [
    ((math.inf,), {}),
    ((math.nan,), {}),
    ((5.0, 0.0), {}),
    ((5.0, -1.0), {}),
    ((5.0, math.inf), {}),
    ((5.0,), {"at_least": 0}),
    ((5.0,), {"at_least": 8, "at_most": 4}),
])
def test_equal_compute_samples_refuses_nonsense(
        args: tuple[float, ...], kwargs: dict[str, int]) -> None:
    with pytest.raises(ValueError):
        equal_compute_samples(*args, **kwargs)


@pytest.mark.parametrize(("answers", "expected"), [
    (["4", "5", "4"], ("4", 0)),
    (["5", "4", "4"], ("4", 1)),
    ([None, "x", None, "y", "y"], ("y", 3)),
    (["a", "b", "b", "a"], ("a", 0)),  # tie: the answer that appeared first
    (["b", "a", "a", "b"], ("b", 0)),
    ([None, "b", "a", "a", "b", "c"], ("b", 1)),
    ([None, None, None], (None, -1)),  # None never wins, even as the most common
    ([None, None, "7"], ("7", 2)),
    (["", "", "1"], ("", 0)),  # an empty normalised answer is still an answer
    ([], (None, -1)),
])
def test_majority(answers: list[str | None], expected: tuple[str | None, int]) -> None:
    assert majority(answers) == expected
