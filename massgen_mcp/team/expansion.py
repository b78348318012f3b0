"""The ``${VAR}`` expansions of one MassGen config file, and what an error may quote of them.

A config may copy values from the environment into its fields. Those values need consent
before a project's file may read them (:mod:`massgen_mcp.team.consent`), and they must never
leave through an error message, so every expansion is tracked: which variable went where, and
what text the file has at that key path.
"""

from __future__ import annotations

from typing import Any

from massgen_mcp.core.env import VAR_REFERENCE, expand_vars

Expanded = list[tuple[str, str]]  # (variable, where it went) for every ${VAR} expanded
_BARE_MASK = 8  # shorter values (a number, "openai") are masked only where quoted


def _as_api_key(name: str) -> str:
    """The fix for a credential-named ``${VAR}`` outside a whole ``api_key``."""
    return f"use it only as the whole api_key (api_key: \"${{{name}}}\") or as api_key_env: {name}"


class Expansion:
    """The ``${VAR}`` expansions of one file: which variable went where (``used``, what
    consent asks about) and, per key path, the text the file has there and what it became.

    A value from the environment may be anything of the user's (a webhook URL, a token of a
    shape no redaction knows), and a config's errors go wherever the caller is, a model
    included: so no error quotes it. A problem with such a field quotes the file's own text
    (``'${SLACK_WEBHOOK_URL}'``), and no hint is derived from the value."""

    def __init__(self, used: Expanded) -> None:
        self.used = used
        self.fields: dict[str, tuple[str, str]] = {}  # key path -> (the file's text, value)

    def expand(self, value: Any, where: str) -> Any:
        """Replace ``${VAR}`` in strings with the environment variable; unset variables are
        errors.

        A credential-named variable may only be a whole ``api_key`` (which the mapping keeps
        as a reference): anywhere else its value would travel as plain text, in a prompt or a
        URL, to whichever server."""
        if isinstance(value, str):
            result = expand_vars(value, where,
                                 read=lambda name, _: self.used.append((name, where)),
                                 credential_fix=_as_api_key)
            if result != value:
                self.fields[where] = (value, result)
            return result
        if isinstance(value, dict):
            return {k: self.expand(v, f"{where}.{k}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.expand(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return value

    def agent(self, raw: Any, index: int) -> Any:
        """An agent with ``${VAR}`` expanded everywhere except a whole-``${VAR}`` api_key,
        which the mapping keeps as a reference."""
        if not isinstance(raw, dict):
            return raw
        where = f"agents[{index}]"
        expanded = {k: self.expand(v, f"{where}.{k}") for k, v in raw.items() if k != "backend"}
        backend = raw.get("backend")
        if isinstance(backend, dict):
            key = backend.get("api_key")
            keep = isinstance(key, str) and VAR_REFERENCE.fullmatch(key) is not None
            # mcp_servers keep their ${VAR}s: resolved when the server starts, never recorded.
            backend = {k: v if (k == "api_key" and keep) or k == "mcp_servers"
                       else self.expand(v, f"{where}.backend.{k}") for k, v in backend.items()}
        if "backend" in raw:
            expanded["backend"] = backend
        return expanded

    def written(self, where: str, text: str) -> str | None:
        """``text`` as the file writes it, when the field at ``where`` came from the
        environment (None when it did not): ``text`` is the field's value, or a string built
        to end with it (``openai/`` + the model)."""
        if where not in self.fields:
            return None
        source, value = self.fields[where]
        for tail, own in ((value, source), (value.strip(), source.strip())):
            if tail and text.endswith(tail):
                return text[:len(text) - len(tail)] + own
        return source

    def mask(self, line: str) -> str:
        """``line`` with every value a field took from the environment put back as the file's
        text: the last guard for a message that quotes a value :meth:`written` did not reach
        (an agent id named twice, say). Bare, a value is replaced only when it is long
        enough not to be a word of the message itself."""
        pairs = sorted(self.fields.values(), key=lambda pair: -len(pair[1]))
        for source, value in pairs:
            line = line.replace(repr(value), repr(source))
        for source, value in pairs:
            if len(value) >= _BARE_MASK:
                line = line.replace(value, source)
        return line
