"""Which version of a coding CLI is installed, and whether massgen-mcp can run it read-only.

Users run CLIs of many ages, and an option a newer version has (Claude Code's
``--permission-prompts``, Codex's ``view_image`` feature) is unknown to an older one. So each
binary is asked once (:func:`learn`): ``--version`` for its version, its help for the options
it lists, and (Codex) its feature list; each
vendor module builds its command line from that (:class:`.base.CliVersion`), and a version
that cannot give the read-only guarantees is refused before any run, in one line naming the
version found, the oldest supported and the command that updates it (:func:`refusal`).

What a binary said is kept in memory and on disk (``cli-versions.json`` in the user cache
folder), keyed by its resolved path, size and modification time, so an update (npm writes
the files anew) is asked again and nothing else is: a CLI start costs 0.1 s (Claude Code's
native binary) to 2-4 s (Gemini CLI under node), and every massgen-mcp process (a ``run``, a
``doctor``, an MCP server) would otherwise pay it again. A failed probe is not kept. What the
cache says decides which options turn a CLI's tools off, so it is believed only from a regular
file of the user's that no one else can write (written 0600); any doubt costs a probe.

A probe is a child like a call (:func:`massgen_mcp.core.supervisor.run_child`: its own session,
killed with everything it started when it ends or times out) with the environment a call gets
(:func:`.environment.child_env`, and a private home where the CLI has one), in an empty temporary
folder: it sees no key the CLI would not see, and leaves nothing in the user's home.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import tempfile
from pathlib import Path

from massgen_mcp.core import portable
from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ProviderError
from massgen_mcp.core.files import MIB, open_safely, replace_file
from massgen_mcp.core.supervisor import run_child
from massgen_mcp.providers.cli.base import Cli, CliVersion
from massgen_mcp.providers.cli.environment import child_env

PROBE_TIMEOUT_S = 60.0  # both questions together; Gemini CLI under node on a busy machine
CACHE_NAME = "cli-versions.json"
CACHE_MAX_BYTES = MIB  # a few lines per CLI: more is not a cache of ours
_VERSION = re.compile(r"\b(\d+)\.(\d+)\.(\d+)\b")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*", re.IGNORECASE)
_FEATURE = re.compile(r"^([a-z][a-z0-9_]*)[ \t]+\S", re.MULTILINE)  # "shell_tool   stable  true"

_Key = tuple[str, int, int]  # resolved path, size, modification time (ns)
_learned: dict[_Key, CliVersion] = {}


class ProbeFailed(Exception):
    """The binary gave no version: it did not start, timed out, or printed none."""


def version_tuple(text: str) -> tuple[int, ...] | None:
    """``(2, 1, 183)`` from ``"2.1.183 (Claude Code)"`` or ``"codex-cli 0.139.0"``."""
    match = _VERSION.search(text)
    return tuple(int(part) for part in match.groups()) if match else None


def cache_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("massgen-mcp")) / CACHE_NAME


def _key(path: str) -> _Key:
    real = os.path.realpath(path)
    stat = os.stat(real)
    return real, stat.st_size, stat.st_mtime_ns


async def learn(cli: Cli, path: str) -> CliVersion:
    """What the binary at ``path`` says about itself: from memory, the disk cache, or asked
    now. Raises :class:`ProbeFailed` when it says no version."""
    key = _key(path)
    if key in _learned:
        return _learned[key]
    found = _read_cache(key)
    if found is None:
        found = await _probe(cli, path)
        _write_cache(key, found)
    _learned[key] = found
    return found


async def _probe(cli: Cli, path: str) -> CliVersion:
    with tempfile.TemporaryDirectory(prefix="massgen-cli-probe-") as name:
        folder = Path(name)
        (folder / "work").mkdir()
        env = child_env(cli, AgentSpec(id="probe", model=f"cli/{cli.name}"))
        if cli.private_home is not None:
            env.update(cli.private_home(folder))
        try:
            async with asyncio.timeout(PROBE_TIMEOUT_S):
                code, out, _ = await run_child([path, "--version"], b"", folder / "work", env)
                _, help_text, help_err = await run_child([path, *cli.help_args], b"",
                                                         folder / "work", env)
                listed = b""
                if cli.features_args:
                    _, listed, _ = await run_child([path, *cli.features_args], b"",
                                                   folder / "work", env)
        except TimeoutError:
            raise ProbeFailed(f"no answer to --version and {' '.join(cli.help_args)} "
                              f"within {PROBE_TIMEOUT_S:.0f} s") from None
        except ProviderError as exc:  # could not start it
            raise ProbeFailed(str(exc)) from None
    printed = out.decode(errors="replace").strip()
    first = printed.splitlines()[0][:80] if printed else ""
    if code != 0 or version_tuple(first) is None:
        raise ProbeFailed(f"'{cli.executable} --version' printed {first!r}, exit status {code}")
    version = _VERSION.search(first)
    assert version is not None
    flags = frozenset(_FLAG.findall((help_text + help_err).decode(errors="replace")))
    features = frozenset(match.group(1) for match in _FEATURE.finditer(
        listed.decode(errors="replace")))
    return CliVersion(version.group(0), flags, features)


def _cache_entries() -> dict[str, object]:
    """The disk cache's entries if the file is one to believe: a regular file (not a link)
    of this user's, which no one else may read or write (0600, as written); else none."""
    with contextlib.suppress(OSError, ValueError), \
            open_safely(cache_path(), CACHE_MAX_BYTES) as handle:
        info = os.fstat(handle.fileno())
        if portable.owned_by_me(info) and not info.st_mode & 0o077:
            entries = json.loads(handle.read(CACHE_MAX_BYTES).decode("utf-8"))
            if isinstance(entries, dict):
                return entries
    return {}


def _read_cache(key: _Key) -> CliVersion | None:
    entry = _cache_entries().get(key[0])
    if not isinstance(entry, dict):
        return None
    version, flags, features = entry.get("version"), entry.get("flags"), entry.get("features")
    if ((entry.get("size"), entry.get("mtime_ns")) != key[1:] or not isinstance(version, str)
            or version_tuple(version) is None or not isinstance(flags, list)
            or not isinstance(features, list)):
        return None
    return CliVersion(version, frozenset(str(flag) for flag in flags),
                      frozenset(str(name) for name in features))


def _write_cache(key: _Key, found: CliVersion) -> None:
    """Add ``found`` to the disk cache (made anew, 0600, replacing whatever was there); a
    cache that cannot be written costs a probe later, never the call."""
    path = cache_path()
    entries = _cache_entries()
    entries[key[0]] = {"size": key[1], "mtime_ns": key[2], "version": found.version,
                       "flags": sorted(found.flags), "features": sorted(found.features)}
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        replace_file(path, json.dumps(entries, indent=1), mode=0o600)


def refusal(cli: Cli, found: CliVersion | ProbeFailed) -> str | None:
    """Why this installed version cannot sit on a team (one line: the version found, the
    oldest supported, the command that updates it), or None when it can."""
    update = f"update it: npm install -g {cli.package}@latest"
    if isinstance(found, ProbeFailed):
        return (f"{cli.title} did not say its version ({found}); massgen-mcp runs "
                f"{cli.oldest} or newer read-only; {update}")
    version = version_tuple(found.version)
    if version is None or version < (version_tuple(cli.oldest) or ()):
        return (f"{cli.title} {found.version} is older than {cli.oldest}, the oldest "
                f"massgen-mcp runs read-only; {update}")
    needs = [*cli.needs, *(need for need, since in cli.needs_from
                           if version >= (version_tuple(since) or ()))]
    missing = [need.split("|") for need in needs
               if not any(found.supports(name) for name in need.split("|"))]
    if missing:  # "--a or --b option", "shell_tool feature": all of them, in one line
        named = ", ".join(" or ".join(names) + (" option" if names[0].startswith("-")
                                                else " feature") for names in missing)
        return (f"{cli.title} {found.version} lists no {named}, which massgen-mcp needs to "
                f"run it read-only (tested from {cli.oldest}); {update}")
    return None


async def check(cli: Cli, path: str) -> tuple[CliVersion | None, str | None]:
    """(what the binary said, why it is refused): the one way discovery, validation and a
    call ask."""
    try:
        found = await learn(cli, path)
    except ProbeFailed as exc:
        return None, refusal(cli, exc)
    return found, refusal(cli, found)


def check_now(cli: Cli, path: str) -> tuple[CliVersion | None, str | None]:
    """:func:`check` for code that is not in an event loop (discovery runs in a thread)."""
    return asyncio.run(check(cli, path))
