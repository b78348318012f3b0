"""What ``results.json`` holds, as typed records: each question's scored runs, its
self-consistency sample, and the best-member choice.

The file is read back on a resume, and an eval folder can come with a cloned repository, so it
is untrusted input: a question that does not fit these records (a NaN cost too) is refused
with the fix, never half-read. The field order is the file's: ``model_dump`` writes the same
JSON as the dicts that came before these records.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, SerializerFunctionWrapHandler, model_serializer

from massgen_mcp.core.records import RunStatus

MAX_SAMPLES = 32  # self-consistency's k, at most
FIGURES = ConfigDict(allow_inf_nan=False)  # JSON allows NaN; no figure of a run is one


class Method(BaseModel):
    """One method's answer to one question, and what it cost."""

    model_config = FIGURES

    answer: str | None
    correct: bool
    calls: int = 0
    tokens: int = 0
    cost_usd: float | None = 0.0  # None: a call's price was unknown
    seconds: float = 0.0


class ArmRun(BaseModel):
    """One consensus run of a question, scored: the team's answer and the two methods its
    first drafts give (each member alone, their majority)."""

    session_id: str
    status: RunStatus
    models: dict[str, str]  # agent id: model
    alone: dict[str, Method]
    majority: Method
    consensus: Method


class QuestionRow(BaseModel):
    """A finished question: a run per compared option set (keyed by its name, ``""`` for the
    eval's own) and, once the second pass has reached it, the best member's self-consistency."""

    question: str
    expected: str
    source: str = ""
    arms: dict[str, ArmRun] = Field(default_factory=dict)
    self_consistency: Method | None = None

    @model_serializer(mode="wrap")
    def _unsampled_has_no_key(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A question not sampled yet has no ``self_consistency`` key, as the file always had."""
        data: dict[str, Any] = handler(self)
        if self.self_consistency is None:
            data.pop("self_consistency", None)
        return data


class BestMember(BaseModel):
    """The member whose self-consistency is the baseline, why it was chosen, and its k."""

    model_config = FIGURES

    agent_id: str
    model: str | None
    chosen_by: str
    warning: str | None
    samples: int = Field(ge=1, le=MAX_SAMPLES)
    team_mean_calls: float
    calls_per_sample: float
