"""Coding-agent CLIs as team members: Claude Code, Codex and Gemini CLI, no API keys needed.

Many users have a coding CLI logged in to a subscription and no API key. An agent whose model is
``cli/claude``, ``cli/codex`` or ``cli/gemini`` (optionally ``cli/<name>/<model>``) runs that CLI
once per call: non-interactively, read-only, with our protocol's prompt on stdin, and its final
message parsed with the JSON decision format of models without tool calling (a garbled reply gets
the engine's corrective retry like any other).

Every call is one child process (:mod:`.provider`, supervised by
:mod:`massgen_mcp.core.supervisor`) with:

* **read-only flags** (one module per vendor: :mod:`.claude`, :mod:`.codex`, :mod:`.gemini`):
  no built-in tool that edits, writes or runs commands, each CLI's own read-only/plan/sandbox
  mode on top, no session files;
* **no MCP servers of the user's** (it would start massgen-mcp inside massgen-mcp): an explicit
  empty MCP configuration, and the user's settings files are not read where the CLI allows it
  (Gemini CLI, which always reads them, gets a private home with a copy of its login);
* **the command line of the installed version** (:mod:`.versions`): each binary is asked its
  version and options once (cached in memory and in the user cache folder); a version that
  cannot run read-only is refused before the run, in one line with the command that updates
  it;
* **a sanitised environment** (:func:`.environment.child_env`): the variables that tell a CLI
  it runs inside another agent session are removed, and so is every credential-named
  variable, except the CLI's own login: its login token and its own vendor's API key
  (``ANTHROPIC_API_KEY`` for Claude Code, ``OPENAI_API_KEY``/``CODEX_API_KEY`` for Codex,
  ``GEMINI_API_KEY`` for Gemini CLI), as in the user's shell. When the agent's config names a
  key (``api_key``/``api_key_env``) or an endpoint (``base_url``, self-hosted or a test's),
  that key, or a placeholder, is the only one;
* **an owner and a clean kill** (:mod:`massgen_mcp.core.supervisor`,
  :mod:`massgen_mcp.core.children`): cancellation, the per-call timeout (``cli_call_timeout_s``),
  or too much output kill everything the CLI started with SIGKILL, and the child is reaped; what it
  started is killed after a normal exit too, so no grandchild outlives the call: on Linux every
  descendant, even one that called ``setsid`` or daemonized; on other platforms the CLI's process
  group;
* **its output read as it streams** (the vendor module's reader of its JSON events, fed line by
  line by :mod:`massgen_mcp.core.supervisor`): the reply's text reaches ``CallContext.on_text``
  (the live draft) while the CLI writes it (Claude Code a few tokens at a time, Gemini CLI a chunk
  at a time, Codex a whole message at a time), and the reply is built from the same events whether
  anyone listens or not; each line and the whole output are capped, and output that is not what the
  CLI should print is a clear error, never a crash;
* **captured stderr**: kept to its last 64 KiB, redacted, appended to the session's
  ``cli.log`` and quoted in the error when the CLI fails.

The working directory is an empty folder in the call's private temporary folder: the agents
answer from the question, the context and each other's answers. (The CLIs' own file tools
cannot be confined to a workspace or kept away from secret files: Codex's read-only sandbox
reads the whole disk.)

The supported CLIs and discovery are in :mod:`.catalog`; :mod:`.base` has what each vendor
module declares (:class:`.base.Cli`) and the readers of CLI output they share.
"""
