"""The provider whose agents are CLI processes: one child per call, with the read-only command
of the CLI's installed version (:mod:`.versions`), a sanitised environment
(:func:`.environment.child_env`) and the chat rendered as one prompt (:func:`render_prompt`);
its output read line by line as it comes (the vendor's :class:`.base.EventReader`: the reply's
text goes to ``CallContext.on_text`` while it is written); stderr goes to the session's
``cli.log``.

A CLI prints in the same format whether or not anyone listens, so the :class:`Completion` is
built the same way either way."""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.files import open_append
from massgen_mcp.core.supervisor import MAX_STDERR_BYTES, run_child
from massgen_mcp.providers.base import CallContext, Completion
from massgen_mcp.providers.cli import versions
from massgen_mcp.providers.cli.base import tail
from massgen_mcp.providers.cli.catalog import CLIS, find_executable
from massgen_mcp.providers.cli.environment import child_env

ERROR_TAIL_CHARS = 600

def render_prompt(messages: list[dict[str, Any]], *, with_system: bool) -> tuple[str, str]:
    """(system, prompt) for a CLI from our chat messages: one prompt per process, so a
    corrective retry is the first prompt, the reply it corrects, and the correction."""
    system = "\n\n".join(str(m.get("content") or "") for m in messages if m["role"] == "system")
    parts: list[str] = []
    for message in messages:
        content = str(message.get("content") or "")
        if message["role"] == "user":
            parts.append(content)
        elif message["role"] == "assistant":
            parts.append(f"<your_previous_reply>\n{content}\n</your_previous_reply>")
    prompt = "\n\n".join(parts)
    if with_system and system:
        prompt = f"<instructions>\n{system}\n</instructions>\n\n{prompt}"
    return system, prompt


class CliProvider:
    """A Provider whose agents are CLI processes; one process per call."""

    async def complete(
        self,
        agent: AgentSpec,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None,
        timeout_s: float,
        context: CallContext | None = None,
    ) -> Completion:
        cli = CLIS.get(agent.cli or "")
        if cli is None:  # a record read back skips the loaders' and preflight's check of it
            raise ProviderError(f"{agent.model}: no such coding-agent CLI; use one of "
                                f"{', '.join(CLIS)}", kind=ErrorKind.UNAVAILABLE)
        executable = find_executable(cli)
        if executable is None:
            raise ProviderError(
                f"{agent.model}: the {cli.executable!r} command is not on PATH; install it "
                f"and log in, or set MASSGEN_{cli.name.upper()}_PATH",
                kind=ErrorKind.UNAVAILABLE)
        found, refused = await versions.check(cli, executable)  # asked once per binary
        if refused or found is None:
            raise ProviderError(f"{agent.model}: {refused}", kind=ErrorKind.UNAVAILABLE)
        system, prompt = render_prompt(messages, with_system=not cli.system_flag)
        started = time.perf_counter()
        # The call's private folder: the CLI works in an empty ``work`` inside it, or in the
        # run's read-only snapshot of the reviewed code (a review: ``work_folder``, owned by
        # the run, not the call); its policy files and private home sit beside, out of its
        # reach.
        snapshot = context.work_folder if context is not None else None
        with tempfile.TemporaryDirectory(prefix="massgen-cli-") as name:
            folder = Path(name)
            (folder / "work").mkdir()
            env = child_env(cli, agent)
            if cli.private_home is not None:
                env.update(cli.private_home(folder))
            argv = [executable,
                    *cli.command(agent, system, folder, found, snapshot is not None)[1:]]
            reader = cli.reader(context.on_text if context is not None else None)
            code, _, stderr = await run_child(argv, prompt.encode(), snapshot or folder / "work",
                                              env, on_line=reader.feed)
        stderr_text = tail(stderr.decode(errors="replace"), MAX_STDERR_BYTES)
        if context is not None and context.log_path is not None and stderr_text.strip():
            _append_log(context.log_path, agent.id, code, stderr_text)
        try:
            completion = reader.finish()
        except ProviderError as exc:
            if code == 0:
                raise
            raise exc.amended(f" (exit status {code}; stderr: "
                              f"{tail(stderr_text.strip(), ERROR_TAIL_CHARS)!r})") from None
        return replace(completion, latency_s=time.perf_counter() - started)


def _append_log(path: Path, agent_id: str, code: int, text: str) -> None:
    # A log line must never fail a call; nor is it appended through a planted link.
    with contextlib.suppress(OSError), os.fdopen(open_append(path), "a",
                                                 encoding="utf-8") as log:
        log.write(f"--- {time.strftime('%Y-%m-%dT%H:%M:%S')} {agent_id} exit {code}\n")
        log.write(text if text.endswith("\n") else text + "\n")
