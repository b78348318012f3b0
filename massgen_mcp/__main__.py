"""The ``massgen-mcp`` command.

Run with no arguments (or ``serve``), it is an MCP server on stdio, spawned by a host that waits
for its opening requests to be answered (``initialize`` or ``server/discover``, then the
lists): a thread answers them from the first instant, while the server loads
(:mod:`massgen_mcp.server.early`), then the CLI starts the server as usual and it takes over.
Started by a person at a terminal instead, it says so on stderr; Ctrl-C ends it quietly.
"""

import os
import sys

# What a Unix tool killed by SIGPIPE reports (128 + 13), as `yes | head` does.
EXIT_BROKEN_PIPE = 141
TTY_HINT = ("massgen-mcp: this is an MCP server for hosts (Claude Code, Claude Desktop, "
            "Cursor, ...), waiting for JSON-RPC on stdin; run 'massgen-mcp install' to add it "
            "to a host, 'massgen-mcp --help' for the command line; Ctrl-C to quit")


def main() -> int:
    from_host = sys.argv[1:] in ([], ["serve"])
    try:
        if from_host:
            if sys.stdin.isatty():
                print(TTY_HINT, file=sys.stderr, flush=True)
            from massgen_mcp.server import early

            early.taken = early.start(sys.stdin.buffer, sys.stdout.buffer)
        from massgen_mcp.core.loading import loading

        with loading():
            from massgen_mcp.cli.main import main as cli_main
            from massgen_mcp.cli.output import EXIT_CANCELLED, end_now

        code = cli_main()
        if code == EXIT_CANCELLED:  # a person pressed Ctrl-C and waits for the prompt
            end_now(code)
        return code
    except KeyboardInterrupt:
        if not from_host:
            raise
        # Ctrl-C before the stdio server's own signal handling is up: end at once with 0.
        # Returning would not do: a Ctrl-C that landed in code a library ran through exec()
        # (dataclasses, typing, namedtuple, all busy while we import) leaves CPython set to
        # die by SIGINT at exit even though it was caught here; and a process stopped halfway
        # through its imports has nothing worth a teardown.
        sys.stderr.flush()
        os._exit(0)
    except BrokenPipeError:  # `massgen-mcp sessions | head -1`: the reader has all it wants
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return EXIT_BROKEN_PIPE


if __name__ == "__main__":
    sys.exit(main())
