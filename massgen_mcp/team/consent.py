"""Consent before a project's config may send your keys, or your project's files, elsewhere.

A repository you clone can carry ``.massgen/config.yaml``. Its team runs with *your* keys on
*your* files, so a config that points ``base_url`` at its own server and reads ``api_key_env:
OPENAI_API_KEY`` would hand that server your key, and one that also turns on the workspace tools
would hand it whatever its model reads there. The rule, like direnv's:

* a config that comes with the project (the discovered ``.massgen/config.yaml``, or a file an
  MCP caller names) is checked before it runs;
* it needs consent when an agent would send a key from your environment (``api_key_env`` or
  ``${VAR}``) to a ``base_url`` that is neither on loopback nor the provider's own API host, or
  another provider's key to any host, or when the file copies any other environment variable
  (``${VAR}``) into a field such as ``base_url`` or a prompt (asked before the file is validated,
  :func:`check_reads`: an error about a field would quote its value), or when it starts MCP servers
  (a command of the file's choosing), or when it lifts the secret-file deny-list
  (``allow_secret_files``), or when it gives agents the workspace tools (``workspace_tools``,
  ``context_paths``) or MCP servers while one of its agents sits at such a foreign endpoint
  (what one agent's tools return reaches every agent, in the answers they read);
* ``massgen-mcp trust PATH`` records consent for the file's exact contents and the values it
  reads from the environment (one SHA-256) in the user config folder, for the file *where it
  is*: the path as reached, symlinks not followed, and the file it resolves to. A repository
  whose ``.massgen`` links to a config you trusted elsewhere is another place, whose relative
  commands would run its own files, so it asks again; any change asks again;
* a model's call (an MCP tool call, the ``/v1`` endpoint) decides less than a file
  (:func:`check_call`): it may not lift the deny-list at all, may not give the workspace tools
  to an agent at a foreign endpoint nor send it files the call picks (``context_files``, a
  review's ``paths``), and its ``base_url`` may not redirect an agent that sends a key from
  your environment.

A session record in the project's ``.massgen`` is a project file as well: a recorded team
that needs consent runs again only if this machine started that run (:func:`check_recorded`).

Keys written inline in the file belong to its author, and agents without a ``base_url`` talk to
their provider's own API, so neither needs consent. Your own user config and the CLI's
``--config`` (you named it at your shell) are trusted.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.env import getenv, user_config_dir
from massgen_mcp.core.errors import UntrustedConfigError
from massgen_mcp.core.files import replace_file
from massgen_mcp.core.net import is_loopback
from massgen_mcp.core.records import RequestRecord
from massgen_mcp.core.spec import TeamConfig
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV, api_hosts, own_provider


def _host(url: str) -> str:
    try:
        return (urlparse(url).hostname or "").lower()
    except ValueError:  # not a URL any resolver agrees on: treat it as foreign
        return ""


def key_destinations(team: TeamConfig) -> list[str]:
    """One line per agent that would send a key from the environment somewhere other than
    loopback or its own provider's API (another provider's key counts as foreign too)."""
    found = []
    for agent in team.agents:
        if not agent.api_key_env:
            continue
        # A CLI agent's key goes to its CLI's vendor (Claude Code: Anthropic's API).
        own = own_provider(agent)
        own_hosts = api_hosts(own)
        host = _host(agent.base_url) if agent.base_url else (own_hosts[0] if own_hosts else "")
        if agent.base_url and is_loopback(host):
            continue
        others_key = any(agent.api_key_env in names for provider, names
                         in PROVIDER_KEY_ENV.items() if provider != own)
        if host in own_hosts and not others_key:
            continue
        where = agent.base_url or f"the {own or 'default'} API"
        found.append(f"agent {agent.id!r} would send ${agent.api_key_env} to {where}")
    return found


def foreign_endpoint(agent: AgentSpec) -> str | None:
    """The agent's ``base_url`` when it is neither on loopback nor its provider's own API host
    (for a CLI agent, its CLI's vendor); None when the agent talks to its provider or to this
    machine."""
    if not agent.base_url:
        return None
    host = _host(agent.base_url)
    if is_loopback(host) or host in api_hosts(own_provider(agent)):
        return None
    return agent.base_url


def _exposed(team: TeamConfig, *, picked: Sequence[str] = ()
             ) -> dict[tuple[str, str], set[str]]:
    """(agent id, foreign endpoint) -> what of the user's would reach it: the project's files
    (workspace tools, or files a call picks, by the fields ``picked`` names: ``context_files``,
    a review's ``paths``) and MCP servers' results. Every agent counts, tools or not: what one
    agent reads goes into its answer, and every agent reads every answer (and the files a
    call picks are in every agent's prompt)."""
    reach = set()
    if team.options.workspace_tools:
        reach.add("the project's files (workspace_tools)")
    reach.update(f"the project's files ({field})" for field in picked)
    if team.mcp_servers():
        reach.add("what the team's MCP servers return")
    if not reach:
        return {}
    found = {}
    for agent in team.agents:
        url = foreign_endpoint(agent)
        if url:
            found[(agent.id, url)] = reach
    return found


def _exposure_lines(exposed: dict[tuple[str, str], set[str]]) -> list[str]:
    return [f"agent {agent!r} at {url} would receive {' and '.join(sorted(what))}"
            for (agent, url), what in exposed.items()]


def exposures(team: TeamConfig) -> list[str]:
    """One line per agent at a foreign endpoint that would receive the project's files or MCP
    servers' results."""
    return _exposure_lines(_exposed(team))


def lifted_secrets(team: TeamConfig) -> list[str]:
    """A line when the team lifts part of the secret-file deny-list (the user's decision)."""
    lifted = team.options.allow_secret_files
    return [f"it lets agents read secret files matching {', '.join(lifted)} "
            "(allow_secret_files)"] if lifted else []


def risks(team: TeamConfig, expanded: list[tuple[str, str]]) -> list[str]:
    """What in a config needs consent: keys sent abroad, commands it starts, secret files it
    opens, the project's files sent abroad, and environment values the file copies into its
    fields (a URL or a prompt could carry them anywhere)."""
    servers = [f"it starts the MCP server {s.name!r}: {s.describe()}"
               for s in team.mcp_servers()]
    return key_destinations(team) + servers + lifted_secrets(team) + exposures(team) + reads(
        expanded)


def reads(expanded: list[tuple[str, str]]) -> list[str]:
    """One line per environment variable the file copies into a field, named as the file
    writes it (its value is the user's business, shown nowhere)."""
    return [f"{where} reads ${{{name}}} from your environment" for name, where in expanded]


def _trust_file() -> Path:
    return user_config_dir() / "trusted.json"


def _trusted() -> dict[str, str]:
    try:
        data = json.loads(_trust_file().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def digest(text: str, expanded: list[tuple[str, str]]) -> str:
    """The file's contents and the values it reads from the environment: consent covers
    both, so a changed variable (a new ``.env``) asks again."""
    values = {name: getenv(name) or "" for name, _ in expanded}
    return hashlib.sha256((text + "\0" + json.dumps(values, sort_keys=True)).encode()
                          ).hexdigest()


def place(path: Path) -> str:
    """Where consent for ``path`` is recorded: the path as reached (absolute, symlinks not
    followed: it names the project the config governs, where its relative commands run) and,
    when it differs, the file it resolves to."""
    reached, real = os.path.abspath(path), str(path.resolve())
    return reached if reached == real else f"{reached} -> {real}"


def check(team: TeamConfig, path: Path, text: str, expanded: list[tuple[str, str]]) -> None:
    """Raise UntrustedConfigError unless ``team`` (read from ``path``, whose contents are
    ``text``, expanding ``expanded``) needs no consent, or the user trusted exactly this,
    here."""
    _require(path, text, expanded, risks(team, expanded))


def check_reads(path: Path, text: str, expanded: list[tuple[str, str]]) -> None:
    """:func:`check` for the environment values alone, before the file is validated: an
    error about a field quotes what is in it, and a file that asks for ``${SLACK_WEBHOOK_URL}``
    as its model would otherwise have the webhook in its error, wherever the caller is."""
    _require(path, text, expanded, reads(expanded))


def _require(path: Path, text: str, expanded: list[tuple[str, str]], found: list[str]) -> None:
    if not found or _trusted().get(place(path)) == digest(text, expanded):
        return
    linked = (f" ({path} leads to {path.resolve()}; consent is given per project, so a link "
              "to a config trusted elsewhere asks again)" if place(path) != str(path.resolve())
              else "")
    raise UntrustedConfigError(
        f"{path} needs your consent before it runs: " + "; ".join(found)
        + f". If you trust this file, run: massgen-mcp trust {path}{linked}")


def trust(path: Path, text: str, expanded: list[tuple[str, str]]) -> Path:
    """Record consent for ``path`` as it is now, where it is; returns the trust file."""
    file = _trust_file()
    entries = _trusted()
    entries[place(path)] = digest(text, expanded)
    file.parent.mkdir(parents=True, exist_ok=True)
    replace_file(file, json.dumps(entries, indent=2) + "\n")
    return file


def revoke(path: Path) -> bool:
    """Forget consent for ``path``; False if there was none."""
    entries = _trusted()
    if entries.pop(place(path), None) is None:
        return False
    replace_file(_trust_file(), json.dumps(entries, indent=2) + "\n")
    return True


def check_call(before: TeamConfig, after: TeamConfig, overrides: dict[str, object],
               base_url: str | None, picked: Mapping[str, Sequence[str]] | None = None
               ) -> None:
    """Refuse what a model's call may not decide (the calling model may have been steered by
    the repository it reads): lifting the secret-file deny-list; giving the workspace tools or
    MCP servers' results to an agent at a foreign endpoint that ``before`` (the team as its
    file or models gave it) did not already give them to; sending the files the call picks
    (``picked``: field -> files, of any kind: ``context_files``, a review's ``paths``) to any
    agent at a foreign endpoint (the call chose them, so no file's consent covers them); and
    a ``base_url`` that would receive a key from the user's environment."""
    if overrides.get("allow_secret_files"):
        raise UntrustedConfigError(
            "options.allow_secret_files: only you can lift the secret-file deny-list, not a "
            "model's call: set options: {allow_secret_files: [...]} in your own config "
            f"({user_config_dir() / 'config.yaml'}), in a file you run yourself (massgen-mcp "
            "run --config FILE), or in the project's config and trust it (massgen-mcp trust)")
    fields = [field for field, files in (picked or {}).items() if files]
    had = _exposed(before)
    new = {where: fresh for where, what in _exposed(after, picked=fields).items()
           if (fresh := what - had.get(where, set()))}
    if new and fields:
        raise UntrustedConfigError(
            f"{fields[0]}: " + "; ".join(_exposure_lines(new)) + ". A model's call cannot "
            "send files it picks to an endpoint that is neither on this machine nor the "
            "provider's own API, whatever consent the team's config has: name them yourself "
            "(massgen-mcp run --context-file FILE, massgen-mcp review PATH), or leave them "
            "out of the call")
    if new:
        raise UntrustedConfigError(
            "; ".join(_exposure_lines(new)) + ". A model's call cannot send your project's "
            "files to an endpoint that is neither on this machine nor the provider's own API: "
            "put the team in a config file and trust it (massgen-mcp trust FILE), or run it "
            "yourself (massgen-mcp run)")
    if base_url:
        _check_override(before, after, base_url)


def _check_override(before: TeamConfig, after: TeamConfig, base_url: str) -> None:
    """Refuse a caller's ``base_url`` that would receive a key from the user's environment."""
    moved = [b for a, b in zip(before.agents, after.agents, strict=True)
             if a.base_url != b.base_url]
    found = key_destinations(TeamConfig(agents=moved)) if moved else []
    if found:
        raise UntrustedConfigError(
            f"base_url {base_url}: " + "; ".join(found) + ". A base_url given in the call "
            "cannot receive a key from your environment; set it in the config file and trust "
            "the file (massgen-mcp trust FILE) instead")


# -- records in a folder the project controls -------------------------------------------------
#
# Records live in ./.massgen by default, inside the project, so a cloned repository can carry
# a session record of its own making: a "recorded" team with a foreign endpoint, MCP server
# commands or lifted secret files, and a workspace anywhere on disk. Resuming or continuing it
# would run that team with no consent asked. So when a run that needs consent starts with its
# record in the project, its config and workspace are remembered (one SHA-256, in the user
# config folder, which no repository writes), and only a record that matches is run again.


class RecordReader(Protocol):
    """The part of the session store consent reads (a protocol, so that choosing the team
    does not depend on the record layer above it)."""

    def read_config(self, session_id: str) -> dict[str, Any]: ...

    def read_request(self, session_id: str) -> RequestRecord: ...


def _run_consent(session_id: str) -> Path:
    return user_config_dir() / "runs" / session_id


def _recorded_digest(store: RecordReader, session_id: str) -> str:
    """One SHA-256 of what a recorded run would run with: its team and its workspace."""
    body = json.dumps({"config": store.read_config(session_id),
                       "workspace": store.read_request(session_id).workspace}, sort_keys=True)
    return hashlib.sha256(body.encode()).hexdigest()


def _run_risks(team: TeamConfig) -> list[str]:
    found = risks(team, [])
    if team.options.workspace_tools:
        found.append("it gives agents the workspace tools")
    return found


def remember_run(store: RecordReader, session_id: str, team: TeamConfig) -> None:
    """Record that this run (its recorded config and workspace) was started here, with
    whatever consent it needed, if it needs any."""
    if _run_risks(team):
        file = _run_consent(session_id)
        file.parent.mkdir(parents=True, exist_ok=True)
        replace_file(file, _recorded_digest(store, session_id) + "\n")


def check_recorded(store: RecordReader, session_id: str, team: TeamConfig) -> None:
    """Refuse to run a recorded team that needs consent unless this machine started exactly
    that run (:func:`remember_run`): the record may have come with the repository."""
    found = _run_risks(team)
    if not found:
        return
    try:
        known = _run_consent(session_id).read_text(encoding="utf-8").strip()
    except OSError:
        known = ""
    if known != _recorded_digest(store, session_id):
        raise UntrustedConfigError(
            f"session {session_id}'s record asks for what needs your consent ("
            + "; ".join(found) + "), and it was not started here as it now reads: a record "
            "in the project folder may have come with the repository. Start a new run with "
            "the team's config instead (a project config asks for consent: massgen-mcp trust)")
