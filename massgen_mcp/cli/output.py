"""What the ``massgen-mcp`` command writes, and the exit codes it ends with.

Every line the CLI writes goes through :func:`say` or :func:`say_json`: what it shows (record
fields, config fields, a server's model names) may come from anyone's files, and a terminal
obeys control characters rather than showing them. One place to write means no command can
forget (``tests/system/test_limits.py`` checks that no other function in :mod:`massgen_mcp.cli`
calls ``print``).

Exit codes, one meaning each, so a script can tell them apart (``massgen-mcp --help`` shows
the same table, :data:`EXIT_CODES_HELP`):

===  ====================================================================================
0    ok: the team agreed on an answer
1    a config or input error (a model string, a file, a session id, a server that cannot be
     reached); nothing was run
2    the run failed: every agent failed, or the record could not be written (``models
     pull``: the download failed)
3    the run timed out (the best answer so far is still printed)
4    cancelled: Ctrl-C, SIGTERM, SIGHUP, or another process cancelled it (``serve --http``
     stopped with Ctrl-C too)
5    a wrong command line (an unknown flag, a missing argument): see the usage line
6    ``serve --http`` cannot listen (the port is busy or the host is not this machine's)
7    completed, but agents were dropped: the answer came from fewer agents than the team had
8    ``review --fail-on SEVERITY``: the team requests changes (an agreed finding at or above
     SEVERITY, or a blocker)
9    a review is inconclusive: the team never voted, every member was dropped, or no member
     wrote a usable review; there is no verdict to gate on
141  the reader of stdout went away (``massgen-mcp sessions | head -1``): a closed pipe, as
     for any Unix tool (:mod:`massgen_mcp.__main__`)
===  ====================================================================================
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from typing import NoReturn

from massgen_mcp.core.outcomes import Verdict
from massgen_mcp.core.records import FinishReason, RunStatus
from massgen_mcp.core.run_state import ResultRecord

EXIT_OK, EXIT_INPUT, EXIT_EXECUTION, EXIT_TIMEOUT, EXIT_CANCELLED = 0, 1, 2, 3, 4
EXIT_USAGE = 5  # the command line itself is wrong (argparse's own 2 would read as execution)
EXIT_LISTEN = 6  # serve --http cannot listen: the port is busy or the host is not ours
# The run completed but not with the whole team: a script that takes exit 0 as "the team
# agreed" must not get it when one agent's provider failed and two answered.
EXIT_DROPPED = 7
# review --fail-on: the review completed and the team's verdict is not "approve" (CI fails).
EXIT_CHANGES_REQUESTED = 8
# A review with no verdict (never voted, every member dropped, nothing usable): neither an
# approve nor changes requested, and not the run's own error, so CI can tell it apart.
EXIT_INCONCLUSIVE = 9
EXIT_CODES_HELP = """exit codes:
  0  ok: the team agreed on an answer
  1  config or input error (model string, file, session id, a server that cannot be
     reached); nothing was run
  2  the run failed: every agent failed, or the record could not be written (models
     pull: the download failed)
  3  the run timed out (the best answer so far is still printed)
  4  cancelled (Ctrl-C, SIGTERM, SIGHUP, or cancelled elsewhere; serve --http: Ctrl-C);
     a review so stopped is interrupted instead: massgen-mcp resume ID goes on
  5  wrong command line (unknown flag, missing argument)
  6  serve --http cannot listen (port busy, or not this machine's address)
  7  completed, but agents were dropped (the answer came from fewer agents)
  8  review --fail-on: the team requests changes (or a blocker blocks the change)
  9  review: inconclusive (the team never voted, every member was dropped, or no
     member wrote a usable review): no verdict
141  the reader of stdout went away (massgen-mcp sessions | head -1)"""
EXIT_BY_STATUS = {
    RunStatus.COMPLETED: EXIT_OK,
    RunStatus.FAILED: EXIT_EXECUTION,
    RunStatus.TIMED_OUT: EXIT_TIMEOUT,
    RunStatus.CANCELLED: EXIT_CANCELLED,
    RunStatus.INTERRUPTED: EXIT_CANCELLED,
}


def exit_code(result: ResultRecord, *, fail_on_changes: bool = False) -> int:
    """The exit code of a finished run: by its status, except that a completed run which
    lost agents on the way says so (:data:`EXIT_DROPPED`), and a completed review whose
    verdict is not "approve" says that first when ``fail_on_changes`` (``--fail-on``): CI
    must fail on the verdict whoever was dropped. A review without a verdict is
    :data:`EXIT_INCONCLUSIVE` however its run ended, unless the user stopped it or its
    record could not be written."""
    if (result.review is not None and result.review.verdict is Verdict.INCONCLUSIVE
            and result.status not in (RunStatus.CANCELLED, RunStatus.INTERRUPTED)
            and result.finish_reason is not FinishReason.RECORD_WRITE_FAILED):
        return EXIT_INCONCLUSIVE
    if (fail_on_changes and result.status is RunStatus.COMPLETED and result.review is not None
            and result.review.verdict is not Verdict.APPROVE):
        return EXIT_CHANGES_REQUESTED
    if result.status is RunStatus.COMPLETED and result.dropped:
        return EXIT_DROPPED
    return EXIT_BY_STATUS[result.status]


def end_now(code: int) -> NoReturn:
    """End the process at once with ``code``, its output flushed and its logs closed, without
    the interpreter's teardown of every object a run left (0.5 s after a run with litellm
    loaded, seconds on a busy machine): a cancelled run's record is closed by then, and
    whoever pressed Ctrl-C is waiting for the prompt. Only the real binary calls it
    (``massgen_mcp.__main__``), never code that runs inside another program."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):  # a closed pipe: nothing to keep
            stream.flush()
    logging.shutdown()
    os._exit(code)


def in_workflow_log() -> bool:
    """Whether what the CLI writes is read by GitHub Actions' runner, which obeys workflow
    commands in any line of the step's log (``GITHUB_ACTIONS=true``)."""
    return os.environ.get("GITHUB_ACTIONS") == "true"


def say(text: str = "", *, err: bool = False, end: str = "\n",
        workflow_commands: bool = False) -> None:
    """Write one line for a person, made terminal-safe
    (:func:`~massgen_mcp.core.edges.terminal_safe`) and, in a GitHub Actions log, no
    workflow command (:func:`~massgen_mcp.core.edges.workflow_inert`) unless it is
    ``workflow_commands`` that massgen-mcp built and escaped itself (review's annotations).
    ``--json`` output goes through :func:`say_json`."""
    from massgen_mcp.core.edges import terminal_safe, workflow_inert

    text = terminal_safe(text)
    if in_workflow_log() and not workflow_commands:
        text = workflow_inert(text)
    print(text, end=end, file=sys.stderr if err else sys.stdout, flush=err)


def say_json(text: str) -> None:
    """Write JSON text, its control characters as ``\\uXXXX`` escapes: the same JSON for a
    program, nothing for a terminal to obey, nor, in a GitHub Actions log, a workflow
    command."""
    from massgen_mcp.core.edges import json_terminal_safe, workflow_inert_json

    text = json_terminal_safe(text)
    print(workflow_inert_json(text) if in_workflow_log() else text)


def err(message: str) -> None:
    """A problem or a note, on stderr, prefixed with the program's name."""
    say(f"massgen-mcp: {message}", err=True)
