"""The eval's scorer reads the answer a reply commits to by the field's conventions, and does
not mistake the digits of model names, labels or versions for numbers."""

from __future__ import annotations

import re

import pytest

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.answers import (
    compile_pattern,
    expected_answer,
    extract,
    is_correct,
    normalise,
)

REPLIES: list[tuple[str, str, bool]] = [
    # The cases the first scorer (massgen_mcp/cli/evaluate.py) was tested on.
    ("The sum is 42.\nAnswer: 42", "42", True),
    ("Answer: 1,024", "1024", True),
    ("It costs $15.00", "15", True),
    ("Answer: 41", "42", False),
    ("I pick (C).\nAnswer: C", "C", True),
    ("A careful look says B", "B", True),
    ("Answer: A", "B", False),
    ("**Answer:** Paris", "paris", True),
    ("", "42", False),
    # The answer line the prompt asks for, in markdown, with reasoning before it.
    ("Let's think step by step.\n1. Natalia sold 48 clips in April.\n2. In May she sold half "
     "as many: 48 / 2 = 24.\n3. Altogether: 48 + 24 = 72.\n\n**Answer:** 72", "72", True),
    ("First, 7 * 8 = 56.\nThen 56 - 14 = 42.\n\nAnswer: 42", "56", False),
    ("Draft: Answer: 40\nWait, I forgot the tax of 2.\nAnswer: 42", "42", True),
    ("Answer: 40\nOn reflection that misses the last step.\nFinal answer: 41", "40", False),
    ("The total is 18 dollars.\n**Answer**: $18", "18", True),
    ("**Final Answer:**\n\n42\n\nChecked by 3 agents.", "42", True),
    ("ANSWER - 17\nConfidence: 9/10", "17", True),
    ("答案如下。\nAnswer：256\nChecked in 2 steps.", "256", True),
    ("Answer: 3 + 4 = 7", "7", True),
    # Model names and labels with digits are not numbers.
    ("The answer is 42. (model fake-1)", "42", True),
    ("I agree with gpt-4o and claude-3.5-sonnet here: the result is 19.", "19", True),
    ("Qwen2.5-7B and llama3 disagree, but agent_2 is right: 64", "64", True),
    ("As computed by fake-1 and fake-2, the area is 36 square units. Checked with v1.2.3.",
     "36", True),
    ("The answer is 42. (model fake-1)", "-1", False),
    ("Total: 64 (checked by fake-1)", "64", True),
    ("Total: 64, says gpt-4o", "64", True),
    ("The sum is 12, by claude-3.5-sonnet and Qwen2.5-7B", "12", True),
    ("The dates differ by 30 days (12/25/2024)", "30", True),
    ("Both said 5, as of v1.2.3", "5", True),
    ("Both said 5, as of release 1.2.3", "5", True),
    ("It grew from 999 to 1,000,000 users.", "1000000", True),
    # LaTeX, as math-tuned models write it.
    ("We simplify:\n$$\\frac{2}{4} = \\frac{1}{2}$$\nSo the answer is $\\boxed{\\frac{1}{2}}$.",
     "0.5", True),
    ("The roots are $x = 2$ and $x = 3$, so the sum is $\\boxed{5}$.\nAnswer: 6", "5", True),
    ("Thus $f(3) = \\boxed{-\\tfrac{7}{2}}$", "-3.5", True),
    ("Answer: $\\dfrac{3}{4}$", "0.75", True),
    ("So the final answer is $\\boxed{\\text{Paris}}$.", "Paris", True),
    # GSM8K style.
    ("Janet has 16 eggs. She eats 3 and bakes with 4, so 16 - 3 - 4 = 9 are left. "
     "9 * $2 = $18.\n#### 18", "18", True),
    ("#### Step 1: count the eggs\n16 - 3 - 4 = 9\n#### Step 2: price them\n9 * 2 = 18",
     "18", True),  # headings are not GSM8K answers: the last number is read
    # Multiple choice, MMLU style.
    ("The question asks for the powerhouse of the cell.\nA) nucleus is wrong.\n"
     "B) mitochondria is correct.\nAnswer: B", "B", True),
    ("Option A ignores friction and option D double-counts it. The answer is (C).", "C", True),
    ("C", "C", True),
    ("Answer: (d)", "D", True),
    ("I think the answer is B because A1 and B2 are ruled out.", "B", True),
    ("Answer: I think it is C, not A.", "C", True),
    ("Answer: I", "I", True),
    ("Considering A1 and B2 first, I'd go with D.", "B", False),
    ("D, I'd say.", "D", True),
    ("I choose 'C'.", "C", True),
    # Negative numbers, units, separators.
    ("The temperature falls from 3 to -5 degrees overnight.", "-5", True),
    ("Answer: −12", "-12", True),
    ("Answer: 12", "-12", False),
    ("The population is 1,234,567 people.\nAnswer: 1,234,567 people", "1234567", True),
    ("The board is 3.5 kg heavier.\nAnswer: 3.50 kg", "3.5 kg", True),
    ("Answer: 45%", "45", True),
    ("Answer: $1,200.00", "$1,200", True),
    ("Answer: .5", "0.5", True),
    ("Answer: 3/4", "0.75", True),
    ("Answer: 1e3", "1000", True),
    ("Answer: $1{,}000$", "1000", True),
    ("Answer: $1\\,000$", "1000", True),
    ("Answer: 30°", "30^\\circ", True),
    ("Answer: 1/0", "1", False),
    ("Answer: 12 cm", "12.0001", False),
    # Text answers.
    ("The capital of France is a famous city.\nAnswer: \"Paris\".", "Paris", True),
    ("Answer: **New York City**", "new york city", True),
    ("Answer: Lyon", "Paris", False),
    ("Answer: C++", "C++", True),
    ("Answer: New-York City", "New York City", True),
    ("Answer: \"?\"", "?", True),
    ("Answer: !", "?", False),
    ("So the point is $\\boxed{\\left(1, 2\\right)}$.", "(1,2)", True),
    # No answer at all.
    ("I am not sure; I cannot compute this without more information.", "42", False),
    ("I am not sure.", "B", False),
    ("Answer: I don't know", "7", False),
]


@pytest.mark.parametrize(("reply", "expected", "right"), REPLIES)
def test_a_reply_is_scored_by_the_fields_conventions(reply: str, expected: str,
                                                     right: bool) -> None:
    assert is_correct(reply, expected) is right


def test_the_table_is_large_and_has_both_outcomes() -> None:
    assert len(REPLIES) >= 30
    assert {right for _, _, right in REPLIES} == {True, False}


@pytest.mark.parametrize(("reply", "found"), [
    ("so $\\boxed{\\frac{1}{2}}$ and not \\boxed{3", "\\frac{1}{2}"),
    ("\\boxed{1} first, then \\boxed{ {2} }", "{2}"),
    ("rationale <<2*3=6>>\n#### 6", "6"),
    ("#### 18.", "18"),
    ("Answer: $\\frac{1}{2}$", "\\frac{1}{2}"),
    ("Answer: “Paris”", "Paris"),
    ("Answer: __Paris__", "Paris"),
    ("Answer: `x = 5`", "x = 5"),
    ("Answer: 'Paris'.", "Paris"),
    ("Final answer: \\(x+1\\)", "x+1"),
    ("#### Step 2: add\nThen 2 + 2 = 4", None),
    ("**Answer:** **Paris**.", "Paris"),
    ("Answer: 40\n...\nAnswer: 42", "42"),
    ("**Answer:**\n\n  **Paris**\nas 2 agents said", "Paris"),
    ("Answer:   \n", None),
    ("Final answer: x = 5", "x = 5"),
    ("The answer is 42. (model fake-1)", "42"),
    ("(the answer is 7) as shown", "7"),
    ("The final answer is: 3.5 kg. That is all.", "3.5 kg"),
    ("answer is (C).", "(C)"),
    ("\\boxed{5}\n#### 6\nAnswer: 7\nThe answer is 8.", "5"),
    ("#### 6\nAnswer: 7\nThe answer is 8.", "6"),
    ("Answer: 7\nThe answer is 8.", "7"),
    ("I computed 42.", None),
])
def test_extract_returns_the_answer_by_the_first_convention(reply: str,
                                                            found: str | None) -> None:
    assert extract(reply) == found


def test_many_unclosed_boxes_still_find_the_closed_one() -> None:
    reply = "\\boxed{" * 20_000 + "\n" + "\\boxed{9}"
    assert extract(reply) == "9"


def test_a_custom_pattern_wins_and_has_no_fallback() -> None:
    pattern = compile_pattern(r"^Result: (\S+)$")
    reply = "Answer: 3\nResult: 4\nResult: 5"
    assert extract(reply, pattern) == "5"
    assert is_correct(reply, "5", pattern)
    assert not is_correct("Answer: 5", "5", pattern)  # no "Result:" line: no answer
    assert normalise("Answer: 5", "5", pattern) is None
    whole = compile_pattern(r"\d+ apples")
    assert extract("I have 3 apples, then 12 apples", whole) == "12 apples"
    assert is_correct("I have 3 apples, then 12 apples", "12", whole)
    optional = compile_pattern(r"final=(\d+)?")
    assert extract("final=7 and final=", optional) == "7"


@pytest.mark.parametrize(("pattern", "message"), [
    ("Answer: (", r"--answer-regex 'Answer: \(' is not a regular expression"),
    (r"(\w+): (\d+)", r"--answer-regex .* has 2 capturing groups; keep one"),
])
def test_a_bad_answer_regex_names_the_option_and_the_fix(pattern: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        compile_pattern(pattern)


def test_compile_pattern_keeps_one_group_and_reads_lines() -> None:
    compiled = compile_pattern(r"^Final: (.+)$")
    assert isinstance(compiled, re.Pattern)
    assert compiled.groups == 1
    assert compiled.flags & re.MULTILINE


@pytest.mark.parametrize(("raw", "answer"), [
    ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nNatalia sold 48+24 = <<48+24=72>>72 "
     "clips altogether in April and May.\n#### 72", "72"),
    ("He pays 1,000 + 200 = <<1000+200=1200>>1,200 dollars.\n#### 1,200", "1,200"),
    ("So the probability is $\\boxed{\\frac{1}{2}}$.", "\\frac{1}{2}"),
    ("  Paris \n", "Paris"),
    ("C", "C"),
])
def test_expected_answer_reads_a_datasets_answer_field(raw: str, answer: str) -> None:
    assert expected_answer(raw) == answer


def test_the_gsm8k_expected_answer_scores_a_reply() -> None:
    expected = expected_answer("He pays 1,000 + 200 = <<1000+200=1200>>1,200.\n#### 1,200")
    assert is_correct("So he pays $1200 in total.\nAnswer: 1200", expected)
    assert not is_correct("So he pays $1000 in total.\nAnswer: 1000", expected)


@pytest.mark.parametrize(("first", "second", "expected"), [
    ("Answer: 1,000", "The total is 1000.0", "1000"),
    ("Answer: 0.75", "\\boxed{\\frac{3}{4}}", "0.75"),
    ("Answer: -5", "Answer: −5.0", "-5"),
    ("Answer: $1,200", "#### 1200", "1200"),
    ("Answer: (C)", "I pick C.", "C"),
    ("Answer: **Paris**", "answer: paris.", "Paris"),
])
def test_equivalent_answers_normalise_alike(first: str, second: str, expected: str) -> None:
    assert normalise(first, expected) is not None
    assert normalise(first, expected) == normalise(second, expected)


def test_normalise_forms_per_kind() -> None:
    assert normalise("Answer: 1,000", "1000") == "1000"
    assert normalise("Answer: -0", "0") == "0"
    assert normalise("Answer: 41", "42") != normalise("Answer: 42", "42")
    assert normalise("I pick (C).", "B") == "C"
    assert normalise("Answer: New York", "Paris") == "newyork"
    assert normalise("Answer: ?", "?") == "?"
    assert normalise("I do not know.", "42") is None
    assert normalise(None, "42") is None
    assert normalise("", "C") is None
    assert normalise("The answer is 42. (model fake-1)", "42") == "42"


@pytest.mark.parametrize("reply", [
    "The answer is" + "\n" * 64_000,
    "Answer" + " " * 64_000 + "x",
    "Answer:" + " \n" * 32_000,
    "answer is " * 10_000,
])
def test_no_reply_makes_extraction_quadratic(reply: str) -> None:
    """Model output is untrusted: a reply that made a pattern backtrack over every position
    took ~80 s here; linear patterns take milliseconds. The bound is about correctness."""
    import time

    began = time.monotonic()
    extract(reply)
    is_correct(reply, "42")
    assert time.monotonic() - began < 10
