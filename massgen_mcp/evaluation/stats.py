"""The uncertainty behind an eval table: how sure a score is, and whether a gap between methods
is more than luck.

``massgen-mcp eval`` runs several methods on the same questions (each team member alone, the
majority of the members' first drafts, the team's consensus, self-consistency of the best member)
and reports, for each, figures computed here. What they mean to a reader of the table:

* **Accuracy and its interval** (:func:`bootstrap_interval`): ``0.62 [0.52, 0.71]`` says the
  method got 62% of *these* questions right, and that accuracies from about 52% to 71% are
  plausible for questions like them. An eval is usually 20-200 questions, so the interval is
  wide; two methods whose intervals overlap may still differ, which is what the paired test is
  for.
* **The paired test** (:func:`mcnemar`): the questions only one of two methods got right, and a
  p-value, the chance of a split at least that lopsided if the two methods were in fact equally
  good. Questions both got right or both got wrong say nothing about which is better and are
  left out. A small p-value (conventionally below 0.05) means the gap is unlikely to be luck;
  a large one means these questions cannot tell the methods apart, not that they are equal.
* **Cost per correct answer** (:func:`cost_per_correct`): what the method spent, in USD, for
  each question it got right; blank when the provider reports no prices or nothing was right.
* **Samples at equal compute** (:func:`equal_compute_samples`): how many independent answers
  the best member gets for self-consistency, so that it makes as many model calls as the team
  did and the comparison is not won by spending more.
* **Majority votes** (:func:`majority`): the answer most samples (or first drafts) agree on.

Everything here is pure and seeded: the same inputs always give the same figures, so a re-run
of an eval reproduces its table.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Interval:
    """A confidence interval for an accuracy, both bounds in ``[0, 1]``."""

    low: float
    high: float


@dataclass(frozen=True)
class PairedTest:
    """Two methods' outcomes on the same questions, and McNemar's exact test on them."""

    a_only: int  # items method A got right and B wrong
    b_only: int  # items B got right and A wrong
    both: int
    neither: int
    p_value: float  # two-sided, exact; 1.0 when no item separates the methods


def bootstrap_interval(outcomes: Sequence[bool], *, level: float = 0.95, resamples: int = 2000,
                       seed: int = 0) -> Interval:
    """The percentile-bootstrap interval of the accuracy (the share of true ``outcomes``),
    bounds rounded to 4 decimals.

    The questions are resampled with replacement ``resamples`` times and the interval is the
    middle ``level`` of the resampled accuracies (linear interpolation between the nearest
    ones). Percentile bootstrap rather than a normal approximation (``p ± 1.96·se``) because it
    assumes nothing about the shape of the accuracy's distribution: its bounds are accuracies
    that resampling actually produced, so they stay in ``[0, 1]`` and are lopsided near 0 or 1,
    where the normal interval is symmetric and can leave ``[0, 1]``. The generator is
    ``random.Random(seed)``: the same inputs always give the same bounds, and a re-run
    reproduces a table. When every outcome is the same, every resample is too, and the interval
    is that one point (``Interval(1.0, 1.0)`` for all true); like any interval drawn from the
    data alone, it then understates the uncertainty (20 of 20 right is not proof of 100%).

    Raises ``ValueError`` for no outcomes, a ``level`` outside ``(0, 1)`` or fewer than one
    resample.
    """
    if not outcomes:
        raise ValueError("bootstrap_interval needs at least one outcome")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level must be between 0 and 1 (exclusive), not {level}")
    if resamples < 1:
        raise ValueError(f"resamples must be at least 1, not {resamples}")
    rng = random.Random(seed)
    values = [1 if outcome else 0 for outcome in outcomes]
    n = len(values)
    means = sorted(sum(rng.choices(values, k=n)) / n for _ in range(resamples))
    tail = (1.0 - level) / 2.0
    return Interval(round(_quantile(means, tail), 4), round(_quantile(means, 1.0 - tail), 4))


def _quantile(ordered: Sequence[float], q: float) -> float:
    """The ``q`` quantile of non-empty ``ordered`` values, interpolating linearly between the
    two nearest (the usual definition, numpy's default)."""
    position = q * (len(ordered) - 1)
    below = math.floor(position)
    above = min(below + 1, len(ordered) - 1)
    fraction = position - below
    return ordered[below] + (ordered[above] - ordered[below]) * fraction


def mcnemar(a: Sequence[bool], b: Sequence[bool]) -> PairedTest:
    """Methods A's and B's outcomes on the same questions (``a[i]`` and ``b[i]`` are question
    ``i``), counted, with McNemar's exact two-sided test of "A and B are equally good".

    Only the discordant questions (one method right, the other wrong) carry evidence; if the
    methods are equally good, each of those is A's with probability 1/2, so the p-value is the
    two-sided binomial tail: twice the chance of a split at most as uneven as the smaller side,
    capped at 1.0, and 1.0 when there are no discordant questions. The exact test rather than
    the chi-square approximation because eval runs are often 20-200 questions, leaving only a
    handful of discordant ones, where the chi-square p-value is unreliable (textbooks ask for
    at least 25). The sum is in integers, so the p-value is the correctly rounded exact one.

    Raises ``ValueError``, naming both lengths, when ``a`` and ``b`` differ in length.
    """
    if len(a) != len(b):
        raise ValueError(f"paired outcomes must have the same length: a has {len(a)}, "
                         f"b has {len(b)}")
    a_only = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
    b_only = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
    both = sum(1 for x, y in zip(a, b, strict=True) if x and y)
    neither = len(a) - a_only - b_only - both
    discordant = a_only + b_only
    tail = sum(math.comb(discordant, i) for i in range(min(a_only, b_only) + 1))
    p_value = min(1.0, 2 * tail / 2**discordant)
    return PairedTest(a_only=a_only, b_only=b_only, both=both, neither=neither, p_value=p_value)


def cost_per_correct(total_cost_usd: float | None, correct: int) -> float | None:
    """What a method spent per question it got right, in USD: the figure that says whether the
    team's extra calls buy accuracy more cheaply than a single model. ``None`` (a blank cell)
    when the cost is unknown (a provider without prices) or nothing was right, where any
    number would mislead.

    Raises ``ValueError`` for a negative ``correct``, which is a bug in the caller.
    """
    if correct < 0:
        raise ValueError(f"correct must not be negative, not {correct}")
    if total_cost_usd is None or correct == 0:
        return None
    return total_cost_usd / correct


def equal_compute_samples(team_mean_calls: float, calls_per_sample: float = 1.0, *,
                          at_least: int = 1, at_most: int = 64) -> int:
    """How many samples ``k`` self-consistency of one model gets so that it makes as many calls
    per question as the team did: ``team_mean_calls / calls_per_sample`` rounded half up
    (``math.floor(x + 0.5)``, so 2.5 gives 3 where Python's ``round`` would give 2), clamped
    to ``[at_least, at_most]``.

    A team beating one model that made a single call may only be spending more; matching the
    calls is the fair baseline. The parity of ``k`` is not adjusted: an even ``k`` can tie,
    and :func:`majority` breaks a tie by the earliest sample, so the comparison stays at equal
    compute rather than buying an extra call to avoid ties. ``at_most`` keeps a runaway team
    (many rounds of revisions) from making the baseline unaffordable.

    Raises ``ValueError`` for a non-finite ``team_mean_calls``, a ``calls_per_sample`` that is
    not a positive finite number, or bounds that are not ``1 <= at_least <= at_most``.
    """
    if not math.isfinite(team_mean_calls):
        raise ValueError(f"team_mean_calls must be a finite number, not {team_mean_calls}")
    if not (math.isfinite(calls_per_sample) and calls_per_sample > 0):
        raise ValueError(f"calls_per_sample must be a positive number, not {calls_per_sample}")
    if not 1 <= at_least <= at_most:
        raise ValueError(f"need 1 <= at_least <= at_most, not at_least={at_least}, "
                         f"at_most={at_most}")
    k = math.floor(team_mean_calls / calls_per_sample + 0.5)
    return max(at_least, min(at_most, k))


def majority(answers: Sequence[str | None]) -> tuple[str | None, int]:
    """The most common answer among ``answers`` (normalised answers, ``None`` where a reply had
    none) and the index of its first occurrence, so the caller can show that sample's reply.

    ``None`` is not an answer and never wins; ``(None, -1)`` when every entry is ``None`` (or
    there are none). A tie goes to the answer that appeared first: deterministic, and with
    samples in the order they were drawn it is the same as picking one of the tied answers at
    random.
    """
    counts: dict[str, int] = {}
    first: dict[str, int] = {}
    for index, answer in enumerate(answers):
        if answer is None:
            continue
        counts[answer] = counts.get(answer, 0) + 1
        first.setdefault(answer, index)
    if not counts:
        return None, -1
    winner = max(counts, key=counts.__getitem__)  # dicts keep first-appearance order
    return winner, first[winner]
