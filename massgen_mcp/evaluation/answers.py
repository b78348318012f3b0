"""The answer a model's reply commits to, read by the field's conventions, and whether it is right.

``massgen-mcp eval`` asks each question with a request to end on a line ``Answer: <answer>``,
but models follow their training as much as the prompt: math-tuned models box their result,
GSM8K-tuned ones end on ``#### 72``, chatty ones write "The answer is 42." and then a sentence
more. So :func:`extract` tries the conventions the field uses, in this order, and the first one
found in the reply wins; within a convention the *last* occurrence wins, because a reply that
corrects itself ends on its final word:

1. the user's ``--answer-regex`` (:func:`compile_pattern`), if given: its group, or its whole
   match; a reply it does not match has no answer (no fallback: the user asked for that form);
2. ``\\boxed{X}`` (braces may nest: ``\\boxed{\\frac{1}{2}}``), the MATH / LaTeX convention;
3. ``#### X`` on its own line with a number, the GSM8K convention (a number, so that markdown
   headings such as ``#### Step 2: add`` are not read as answers);
4. an answer line: ``Answer: X``, ``**Answer:** X``, ``Final answer: X``, ``ANSWER - X``
   (any case, a full-width colon too; X may be on a later line), what the prompt asks for;
5. "the answer is X" / "the final answer is: X", X ending with the sentence (a period and a
   space, a newline or an unopened closing parenthesis);
6. none of these: the whole reply.

What counts in that text depends on the kind of the expected answer (:func:`normalise`):

* a **letter** (A-J, multiple choice): the candidate itself when it is one letter ("(c)",
  "**C**"), else its first standalone capital A-J (the last one when reading the whole reply,
  e.g. "I pick (C)."). "A" and "I" before a lower-case word are the article and the pronoun
  ("I'd" too); letters glued to digits ("A1", "B2") are labels, not options;
* a **number** (an answer that is one number, perhaps with a currency sign or a unit): the first
  number after the candidate's last ``=`` (so "12 * 3 = 36" is 36), else its first number; the
  last number when reading the whole reply. Numbers may have thousands separators, a sign
  (``-``, ``+``, the Unicode minus ``−``), decimals, an exponent and units (``$1,200``,
  ``-.5``, ``45%``, ``3.5 kg``, ``1e3``); ``3/4`` and ``\\frac{3}{4}`` are 0.75. Digits that are
  part of an identifier are not numbers: ``fake-1``, ``gpt-4o``, ``claude-3.5-sonnet``,
  ``Qwen2.5-7B``, ``agent_2``, ``v1.2.3``, dates ``12/25/2024``; so a hyphen is a minus sign only
  when no letter or digit comes before it. Numbers are equal within a relative tolerance of
  1e-6 (units are not compared: "12 m" is right for "12 cm");
* anything else is **text**, compared case-insensitively without punctuation or spaces, or
  as written without a trailing period, surrounding quotes, markdown emphasis or math
  delimiters (which is what tells answers that are all punctuation, such as "?", apart).

Everything here is pure (no I/O), so the scorer can be tested on replies alone.
"""

from __future__ import annotations

import math
import re
from collections import deque
from collections.abc import Iterable, Iterator
from typing import TypeVar

from massgen_mcp.core.errors import ConfigError

# A number not inside an identifier: no letter, digit, underscore, '.' or '/' just before it,
# and no letter or digit before its minus sign; no more digits, '/' or '.digit' just after it.
# The look-behind (?<=\d) makes sure at least one digit was read (".5" and "5." are numbers,
# "." is not).
_NUMBER_SOURCE = (
    r"(?<![\w./])(?<!\w[-−])(?P<sign>[-−+]?)[$€£¥]?"
    r"(?:(?P<num>\d+)/(?P<den>\d+)"
    r"|(?P<int>\d{1,3}(?:,\d{3})+|\d+)?(?P<frac>\.\d+)?(?<=\d)(?P<exp>[eE][-+]?\d+)?)"
    r"(?![\d/])(?!\.\d)"
)
_UNIT = r"(?:%|°?[^\W\d_]+(?:/[^\W\d_]+)?|°)"
_NUMBER = re.compile(_NUMBER_SOURCE)
_NUMERIC_ANSWER = re.compile(rf"\s*{_NUMBER_SOURCE}(?:[ \t]*{_UNIT})?\.?\s*")
_EQUALS = re.compile(r"[=≈]")
_LETTER = re.compile(r"(?<!\w)(?:[B-HJ]|[AI](?![ \t]+[a-z]))(?!\w|['’][a-z])")
_LETTERS = "ABCDEFGHIJ"

# The conventions, in the order they are tried (the module's documentation says why).
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_HASHES = re.compile(
    rf"^[ \t]*####[ \t]*(?P<x>{_NUMBER_SOURCE}(?:[ \t]*{_UNIT})?)\.?[ \t]*$", re.MULTILINE)
# An answer line's label, markdown and all; X after it or on a later line. X starts with a
# non-space: no two parts of the pattern can match the same spaces, so a line of spaces is
# rejected in linear time.
_ANSWER_LINE = re.compile(
    r"^[ \t>#*_-]*+(?:(?:the|my|final|correct)[ \t]+){0,2}answer[ \t*_]*+"
    r"(?:[:：]|(?<=[ \t])[-–—][ \t]+)[ \t*]*+(?:\n[ \t]*+)*+(?P<x>\S[^\n]*)",
    re.IGNORECASE | re.MULTILINE)
_ANSWER_IS = re.compile(  # X may hold whole parentheses: "the answer is (C)."
    r"\banswer\s++is\b\s*+:?\s*+(?P<x>(?:\([^()\n]*\)|[^\n)])+?)(?=\.(?:\s|$)|[\n)]|$)",
    re.IGNORECASE)

# LaTeX that only spells a value: \frac{3}{4} is 3/4, \text{cm} is cm, 1{,}000 and 1\,000 are
# 1,000, 30^\circ is 30, \left( is (.
_LATEX = (
    (re.compile(r"\\[dt]?frac\s*\{\s*([-−]?\d+)\s*\}\s*\{\s*(\d+)\s*\}"), r"\1/\2"),
    (re.compile(r"\\(?:text|textbf|mathrm|mathbf|operatorname)\s*\{([^{}]*)\}"), r"\1"),
    (re.compile(r"\{,\}"), ","),
    (re.compile(r"\\(?:left|right)(?![A-Za-z])|\\[,;:! ]|\^\s*\{?\\circ\}?"), ""),
)
_WRAPPERS = (("_", "_"), ("`", "`"), ('"', '"'), ("'", "'"), ("“", "”"), ("‘", "’"),
             ("$", "$"), ("\\(", "\\)"), ("\\[", "\\]"))  # "__x__" is "_x_" twice
_PUNCTUATION = re.compile(r"[\W_]+")
_T = TypeVar("_T")


def compile_pattern(pattern: str) -> re.Pattern[str]:
    """A user's ``--answer-regex``, compiled with ``re.MULTILINE`` (``^`` and ``$`` match at
    line ends); it may have one capturing group, the answer."""
    try:
        compiled = re.compile(pattern, re.MULTILINE)
    except re.error as exc:
        raise ConfigError(
            f"--answer-regex {pattern!r} is not a regular expression ({exc}); give a Python "
            "regex whose one group, if any, is the answer, e.g. --answer-regex 'Final: (.+)'"
        ) from None
    if compiled.groups > 1:
        raise ConfigError(
            f"--answer-regex {pattern!r} has {compiled.groups} capturing groups; keep one, "
            "around the answer, and write the others as (?:...)")
    return compiled


def extract(reply: str, pattern: re.Pattern[str] | None = None) -> str | None:
    """The answer text ``reply`` commits to by the first convention it uses (see the module's
    documentation), without surrounding markdown, quotes or trailing period; None if none."""
    if pattern is not None:
        answers = (m[1] if pattern.groups else m[0] for m in pattern.finditer(reply))
        found = _last(a for a in answers if a and a.strip())
    else:
        found = _by_convention(reply)
    return (_tidy(found) or None) if found else None


def expected_answer(raw: str) -> str:
    """The comparable answer in a dataset's answer field: what follows a GSM8K rationale's
    last ``####``, else the content of its last ``\\boxed{}``, else the stripped text."""
    if "####" in raw:
        return raw.rpartition("####")[2].strip()
    return (_last_boxed(raw) or raw).strip()


def normalise(text: str | None, expected: str,
              pattern: re.Pattern[str] | None = None) -> str | None:
    """The comparable form of reply ``text`` for ``expected``'s kind: a letter, a number (as
    ``%.7g``) or squashed text; None if it has no answer. Equal forms are the same answer."""
    read = _candidate(text, pattern)
    if read is None:
        return None
    candidate, explicit = read
    if _is_letter(expected):
        return _letter(candidate, explicit=explicit)
    if _numeric(expected) is not None:
        value = _number(candidate, explicit=explicit)
        return None if value is None else f"{value + 0.0:.7g}"  # + 0.0: -0 is 0
    return _squash(candidate) or _tidy(candidate).casefold() or None


def is_correct(reply: str | None, expected: str,
               pattern: re.Pattern[str] | None = None) -> bool:
    """Whether ``reply``'s answer is ``expected`` (an answer as :func:`expected_answer` gives)."""
    read = _candidate(reply, pattern)
    if read is None:
        return False
    candidate, explicit = read
    if _is_letter(expected):
        return _letter(candidate, explicit=explicit) == expected.strip()
    want = _numeric(expected)
    if want is not None:
        got = _number(candidate, explicit=explicit)
        return got is not None and math.isclose(got, want, rel_tol=1e-6, abs_tol=1e-9)
    target = _latex(expected)
    squashed = _squash(candidate)
    bare = _tidy(candidate).casefold()
    return (squashed != "" and squashed == _squash(target)) or (
        bare != "" and bare == _tidy(target).casefold())


def _candidate(reply: str | None, pattern: re.Pattern[str] | None) -> tuple[str, bool] | None:
    """The text to read the answer from, and whether the reply stated it by a convention
    (else it is the whole reply); None when the reply is empty or misses the user's pattern."""
    if not reply:
        return None
    found = extract(reply, pattern)
    if found is not None:
        return _latex(found), True
    return None if pattern is not None else (_latex(reply), False)


def _by_convention(reply: str) -> str | None:
    boxed = _last_boxed(reply)
    if boxed and boxed.strip():
        return boxed
    for convention in (_HASHES, _ANSWER_LINE, _ANSWER_IS):
        match = _last(convention.finditer(reply))
        if match:
            return match["x"]
    return None


def _last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` whose braces close (one pass: a reply with many
    unclosed boxes costs no more than one without)."""
    starts = {m.end() - 1 for m in _BOXED.finditer(text)}
    if not starts:
        return None
    found = None
    opened: list[int] = []
    for index in range(min(starts), len(text)):
        if text[index] == "{":
            opened.append(index)
        elif text[index] == "}" and opened:
            start = opened.pop()
            if start in starts:
                found = text[start + 1:index]
    return found


def _tidy(text: str) -> str:
    """``text`` without surrounding space, markdown emphasis, quotes or math delimiters, and
    without a trailing period."""
    while True:
        before = text
        text = text.strip(" \t\r\n*").removesuffix(".")
        for left, right in _WRAPPERS:
            if (len(text) > len(left) + len(right) and text.startswith(left)
                    and text.endswith(right)):
                text = text[len(left):-len(right)]
                break
        if text == before:
            return text


def _latex(text: str) -> str:
    for pattern, replacement in _LATEX:
        text = pattern.sub(replacement, text)
    return text


def _squash(text: str) -> str:
    return _PUNCTUATION.sub("", text.casefold())


def _is_letter(expected: str) -> bool:
    letter = expected.strip()
    return len(letter) == 1 and letter in _LETTERS


def _letter(text: str, *, explicit: bool) -> str | None:
    bare = _tidy(text).strip("()[]:. ")
    if len(bare) == 1 and bare.upper() in _LETTERS:
        return bare.upper()
    letters: list[str] = _LETTER.findall(text)
    if not letters:
        return None
    return letters[0] if explicit else letters[-1]


def _numeric(expected: str) -> float | None:
    """``expected``'s value if it is one number (perhaps with a currency sign or a unit)."""
    match = _NUMERIC_ANSWER.fullmatch(_latex(expected))
    return None if match is None else _value(match)


def _number(text: str, *, explicit: bool) -> float | None:
    if explicit:  # "12 * 3 = 36": the value after the last '=', else the first one
        tail = _EQUALS.split(text)[-1]
        return next((v for part in (tail, text) for v in _values(part)), None)
    return _last(_values(text))


def _values(text: str) -> Iterator[float]:
    for match in _NUMBER.finditer(text):
        value = _value(match)
        if value is not None:
            yield value


def _value(match: re.Match[str]) -> float | None:
    """A number match's value; None for a fraction over zero."""
    if match["den"] is not None:
        denominator = float(match["den"])
        if denominator == 0:
            return None
        value = float(match["num"]) / denominator
    else:
        value = float((match["int"] or "").replace(",", "") + (match["frac"] or "")
                      + (match["exp"] or ""))
    return -value if match["sign"] in ("-", "−") else value


def _last(items: Iterable[_T]) -> _T | None:
    found = deque(items, maxlen=1)
    return found[0] if found else None
