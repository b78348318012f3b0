"""The ``massgen-mcp`` command.

Run with no arguments (or ``serve``), it is an MCP server on stdio, spawned by a host that waits
for the reply to ``initialize``: that reply is sent before anything heavy is imported
(:mod:`massgen_mcp.server.handshake`), then the CLI starts the server as usual.
"""

import sys


def main() -> int:
    if sys.argv[1:] in ([], ["serve"]):
        from massgen_mcp.server import handshake

        handshake.taken = handshake.answer_early(sys.stdin.buffer, sys.stdout.buffer)
    from massgen_mcp.cli import main as cli_main

    return cli_main()


if __name__ == "__main__":
    sys.exit(main())
