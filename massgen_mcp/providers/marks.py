"""The phrases that say what a call is for, in the system prompt every model is sent.

A model sees only messages, so a scripted model (:mod:`massgen_mcp.testing`) can tell the final
presentation, the final answer's check and a JSON-format turn apart only by what the prompt
says. The protocol's prompts (:mod:`massgen_mcp.consensus.prompts`) are built around these
phrases and the scripted models look for exactly these, so rewording a prompt cannot silently
change what every scripted test answers (``tests/testing/test_scripted.py`` checks that each phrase
is in its own prompts and in no other). They live at the provider seam because both sides,
the protocol and the models, import it.
"""

from __future__ import annotations

from massgen_mcp.core.records import CallPurpose

FINAL_MARK = "selected your answer"  # the winner's final presentation
CHECK_MARK = "check it against the question"  # the winner's check of the final answer
JSON_MARK = '"action"'  # a workflow turn answered as JSON (a model without tool calling)

# The purposes a tool-less call's system prompt names (the others are told apart by tools).
PURPOSE_MARKS: dict[CallPurpose, str] = {CallPurpose.FINAL: FINAL_MARK,
                                         CallPurpose.CHECK: CHECK_MARK}
