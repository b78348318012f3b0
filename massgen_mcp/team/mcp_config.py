"""An agent's ``mcp_servers`` as a MassGen config writes them, read into server specs.

MassGen writes them as a mapping ``name -> server`` or as a list of servers with a ``name``;
both read the same. A server's name becomes part of every tool name
(``mcp__<server>__<tool>``), so it is held to a short plain pattern. A literal credential in a
server's ``env`` or ``headers`` is registered for redaction here, as the file is read, so it is
masked wherever it could appear later; a ``${VAR}`` there is resolved only when the server
starts (:mod:`massgen_mcp.tools.mcp_servers`).
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import ValidationError

from massgen_mcp.core.agent import McpServerSpec
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.secrets import looks_secret, register_secret

_SERVER_NAME = re.compile(r"[A-Za-z0-9_\-]{1,40}")


# MassGen server keys with no meaning here: ignored with a warning saying what they do upstream.
_SERVER_IGNORED = {"defer_loading": "deferring the server's tools behind tool search"}


def parse_servers(raw: Any, where: str, warnings: list[str] | None = None
                  ) -> list[McpServerSpec]:
    """MassGen's ``mcp_servers`` (mapping or list form) as specs; ConfigError naming the key.
    Keys of :data:`_SERVER_IGNORED` are dropped, with a line in ``warnings``."""
    items: list[tuple[str, Any]]
    if isinstance(raw, dict):
        items = [(str(name), body) for name, body in raw.items()]
    elif isinstance(raw, list):
        items = [(str(body.get("name", "")) if isinstance(body, dict) else "", body)
                 for body in raw]
    else:
        raise ConfigError(f"{where}: expected a mapping of name -> server, or a list of servers")
    servers = []
    for i, (name, body) in enumerate(items):
        here = f"{where}.{name}" if isinstance(raw, dict) else f"{where}[{i}]"
        if not isinstance(body, dict):
            raise ConfigError(f"{here}: expected a mapping with type and command or url")
        if not _SERVER_NAME.fullmatch(name) or "__" in name:
            raise ConfigError(f"{here}.name: use 1-40 letters, digits, '_' or '-' (no '__', "
                              "which separates server and tool in mcp__server__tool)")
        for key in set(body) & set(_SERVER_IGNORED):
            if warnings is not None:
                warnings.append(f"{here}.{key}: ignored (MassGen: {_SERVER_IGNORED[key]}; not "
                                "in massgen-mcp)")
        data = {k: v for k, v in body.items() if k != "name" and k not in _SERVER_IGNORED}
        try:
            spec = McpServerSpec(name=name, **data)
        except ValidationError as exc:
            first = exc.errors()[0]
            field = ".".join(str(part) for part in first["loc"])
            message = ("unknown key; remove it" if first["type"] == "extra_forbidden"
                       else first["msg"])
            raise ConfigError(f"{here}{'.' + field if field else ''}: {message}") from None
        if spec.type == "stdio" and not spec.command:
            raise ConfigError(f"{here}.command: required for a stdio server")
        if spec.type != "stdio" and not (spec.url or "").startswith(("http://", "https://")):
            raise ConfigError(f"{here}.url: required, an http(s) URL, for a {spec.type} server")
        for key, value in {**spec.env, **spec.headers}.items():
            if looks_secret(key) or key.lower() == "authorization":
                register_secret(value)  # a literal credential: masked wherever it appears
        servers.append(spec)
    names = [s.name for s in servers]
    if len(set(names)) != len(names):
        raise ConfigError(f"{where}: two servers share a name")
    return servers
