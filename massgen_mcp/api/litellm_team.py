"""The team as a LiteLLM provider: after :func:`register_with_litellm`,
``litellm.completion(model="massgen/<team>", messages=...)`` (and ``acompletion``, and
``stream=True``) runs a consensus in this process and answers with its final answer.

``<team>`` is ``default`` (the default team), ``@preset`` or the name of a config in the user
config folder, as in :mod:`massgen_mcp.api.team_names`. Usage is the whole team's; the cost
(``response._hidden_params["response_cost"]``, what ``litellm.completion_cost`` reports) is the
run's priced calls, and ``response._hidden_params["massgen"]`` holds the session id, winner
and tally. Any LiteLLM-based framework can then put a whole team where it expects one model.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from collections.abc import AsyncIterator, Iterator
from typing import Any

from massgen_mcp.api.python import arun
from massgen_mcp.api.team_names import (
    DEFAULT_TEAM,
    no_answer,
    run_summary,
    split_messages,
    team_config,
    usage_counts,
)
from massgen_mcp.core.run_state import ResultRecord

PROVIDER = "massgen"


def _config(model: str) -> str | None:
    name = model.removeprefix(f"{PROVIDER}/")
    return team_config(DEFAULT_TEAM if name in ("", "default", DEFAULT_TEAM)
                       else f"{DEFAULT_TEAM}/{name}")


async def _consensus(model: str, messages: list[dict[str, Any]]) -> ResultRecord:
    question, context = split_messages(messages)
    return await arun(question, context=context, config=_config(model))


def _blocking(model: str, messages: list[dict[str, Any]]) -> ResultRecord:
    """Run a consensus from synchronous code, even when an event loop runs in this thread."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(_consensus(model, messages))
    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, _consensus(model, messages)).result()


def _answer(result: ResultRecord) -> str:
    """The final answer, or an error saying how the run ended without one."""
    if result.final_answer is None:
        from massgen_mcp.core.errors import ProviderError

        why = no_answer(result, subject="the team's run")
        raise ProviderError(f"{why}; session {result.session_id}", retryable=False)
    return result.final_answer


def _fill(response: Any, model: str, result: ResultRecord) -> Any:
    from litellm.types.utils import Usage

    response.choices[0].message.content = _answer(result)
    response.choices[0].finish_reason = "stop"
    response.model = f"{PROVIDER}/{model.removeprefix(f'{PROVIDER}/')}"
    counts = usage_counts(result)
    response.usage = Usage(prompt_tokens=counts["prompt_tokens"],
                           completion_tokens=counts["completion_tokens"],
                           total_tokens=counts["total_tokens"])
    response._hidden_params["response_cost"] = result.usage.cost_usd
    response._hidden_params["massgen"] = run_summary(result)
    return response


def _chunks(result: ResultRecord) -> list[dict[str, Any]]:
    return [{"text": _answer(result), "tool_use": None, "is_finished": True,
             "finish_reason": "stop", "usage": usage_counts(result), "index": 0,
             "provider_specific_fields": {"massgen": run_summary(result)}}]


def _handler() -> Any:
    from litellm.llms.custom_llm import CustomLLM

    class MassgenTeam(CustomLLM):
        """Each call is one consensus run; the messages' last user turn is the question."""

        def completion(self, model: str, messages: list[Any], *args: Any, **kwargs: Any
                       ) -> Any:
            return _fill(kwargs["model_response"] if "model_response" in kwargs else args[2],
                         model, _blocking(model, messages))

        async def acompletion(self, model: str, messages: list[Any], *args: Any,
                              **kwargs: Any) -> Any:
            return _fill(kwargs["model_response"] if "model_response" in kwargs else args[2],
                         model, await _consensus(model, messages))

        def streaming(self, model: str, messages: list[Any], *args: Any, **kwargs: Any
                      ) -> Iterator[Any]:
            yield from _chunks(_blocking(model, messages))

        async def astreaming(  # type: ignore[override]  # an async generator, as litellm uses it
                self, model: str, messages: list[Any], *args: Any, **kwargs: Any
        ) -> AsyncIterator[Any]:
            for chunk in _chunks(await _consensus(model, messages)):
                yield chunk

    return MassgenTeam()


def register_with_litellm() -> None:
    """Make ``massgen/<team>`` a LiteLLM model (idempotent; imports litellm, ~3 s)."""
    from massgen_mcp.providers.litellm_provider import load_litellm

    litellm = load_litellm()
    entries = [e for e in getattr(litellm, "custom_provider_map", None) or []
               if e.get("provider") != PROVIDER]
    litellm.custom_provider_map = [  # type: ignore[attr-defined]
        *entries, {"provider": PROVIDER, "custom_handler": _handler()}]
    litellm.utils.custom_llm_setup()
