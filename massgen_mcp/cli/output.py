"""What the ``massgen-mcp`` command writes, and the exit codes it ends with.

Every line the CLI writes goes through :func:`say` or :func:`say_json`: what it shows (record
fields, config fields, a server's model names) may come from anyone's files, and a terminal
obeys control characters rather than showing them. One place to write means no command can
forget (``tests/test_limits.py`` checks that no other function in :mod:`massgen_mcp.cli`
calls ``print``).

Exit codes: 0 ok, 1 config or input error, 2 execution error (all agents failed), 3 timed out,
4 cancelled or interrupted, 5 a wrong command line, 6 ``serve --http`` cannot listen.
"""

from __future__ import annotations

import sys

from massgen_mcp.core.records import RunStatus

EXIT_OK, EXIT_INPUT, EXIT_EXECUTION, EXIT_TIMEOUT, EXIT_CANCELLED = 0, 1, 2, 3, 4
EXIT_USAGE = 5  # the command line itself is wrong (argparse's own 2 would read as execution)
EXIT_LISTEN = 6  # serve --http cannot listen: the port is busy or the host is not ours
EXIT_BY_STATUS = {
    RunStatus.COMPLETED: EXIT_OK,
    RunStatus.FAILED: EXIT_EXECUTION,
    RunStatus.TIMED_OUT: EXIT_TIMEOUT,
    RunStatus.CANCELLED: EXIT_CANCELLED,
    RunStatus.INTERRUPTED: EXIT_CANCELLED,
}


def say(text: str = "", *, err: bool = False, end: str = "\n") -> None:
    """Write one line for a person, made terminal-safe
    (:func:`~massgen_mcp.core.edges.terminal_safe`). ``--json`` output goes through
    :func:`say_json`."""
    from massgen_mcp.core.edges import terminal_safe

    print(terminal_safe(text), end=end, file=sys.stderr if err else sys.stdout, flush=err)


def say_json(text: str) -> None:
    """Write JSON text, its control characters as ``\\uXXXX`` escapes: the same JSON for a
    program, nothing for a terminal to obey."""
    from massgen_mcp.core.edges import json_terminal_safe

    print(json_terminal_safe(text))


def err(message: str) -> None:
    """A problem or a note, on stderr, prefixed with the program's name."""
    say(f"massgen-mcp: {message}", err=True)
