"""A tool call whose arguments do not fit the tool's schema gets one line: each wrong field and
what it takes (``wait_s: expected a number, got a string``).

Left to fastmcp, the reply is pydantic's report: a count, the tool's internal name, a line per
field, pydantic's error codes, the input echoed back and a link to pydantic's site. A host shows
that text to a person, and a model reads it to correct its call; both need only the field and
the type.
"""

from __future__ import annotations

from typing import Any

from fastmcp.exceptions import ToolError, ValidationError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from mcp.types import CallToolRequestParams
from pydantic import ValidationError as PydanticValidationError
from pydantic_core import ErrorDetails

from massgen_mcp.core.spec import validation_problems

# pydantic's "Input should be a valid X" -> the JSON Schema type a host's schema shows.
_EXPECTED = {"string": "a string", "number": "a number", "integer": "an integer",
             "boolean": "a boolean", "list": "an array", "array": "an array",
             "dictionary": "an object", "object": "an object"}
_JSON_TYPE = ((bool, "a boolean"), (int, "an integer"), (float, "a number"), (str, "a string"),
              (list, "an array"), (dict, "an object"), (type(None), "null"))


def json_type(value: object) -> str:
    """What JSON calls ``value``'s type (bool before int: True is an int in Python)."""
    return next((name for kind, name in _JSON_TYPE if isinstance(value, kind)), "a value")


def why(error: ErrorDetails, message: str) -> str:
    """A type error as expected/got; any other problem (a range, a length, a choice, a missing
    or unknown field) as :func:`~massgen_mcp.core.spec.validation_problems` says it."""
    if error["type"] == "missing_argument":
        return "required"
    if error["type"] == "unexpected_keyword_argument":
        return "no such argument"
    wanted = error["msg"].removeprefix("Input should be a valid ").split(",")[0].split(" ")[0]
    if error["msg"].startswith("Input should be a valid ") and wanted in _EXPECTED:
        return f"expected {_EXPECTED[wanted]}, got {json_type(error.get('input'))}"
    return message


def one_line(tool: str, exc: PydanticValidationError) -> str:
    problems = [f"{path or 'arguments'}: {why(error, message)}"
                for error, (path, message) in zip(exc.errors(), validation_problems(exc),
                                                   strict=True)]
    return f"invalid arguments for {tool}: " + "; ".join(problems)


class ArgumentErrors(Middleware):
    """Turns fastmcp's argument-validation error into :func:`one_line`."""

    async def on_call_tool(self, context: MiddlewareContext[CallToolRequestParams],
                           call_next: CallNext[CallToolRequestParams, Any]) -> Any:
        try:
            return await call_next(context)
        except ValidationError as exc:
            if not isinstance(exc.__cause__, PydanticValidationError):
                raise
            raise ToolError(one_line(context.message.name, exc.__cause__)) from None
