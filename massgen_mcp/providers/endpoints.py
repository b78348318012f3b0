"""Whether a model's server can be reached, asked before a run and told on a failed call.

A ``base_url`` with nothing listening, a host name that does not resolve, ``https://`` to a
plain-HTTP port, or Ollama not running: litellm reports each as "Connection error." (or with an
``ssl:<SSLContext object ...>`` repr), and, taken for a dropped connection, it would be
retried for seconds. Two checks, so that the user sees the URL and what to do at once:

* :func:`unreachable` connects to each endpoint a team names (TCP, plus a TLS handshake for
  https) before a run in this process writes its record, and says why one takes no
  connection (refused, no such host, not TLS, no answer). Only explicit endpoints are probed
  (``base_url``, Ollama's local default), never a hosted provider's API, and a success is
  remembered per endpoint for :data:`PROBE_TTL_S`, so a healthy run pays one local connect
  (well under a millisecond) now and then. A pool's front end does not probe: the worker that
  will make the calls may see another network (``localhost`` is the worker's).
  The probe is the connect alone, so that it costs a run no more than the connect: it asks
  the server nothing. It used to POST an empty request and wait up to 2 s for the reply (a
  web page there meant a wrong ``base_url``), and a server slow to refuse that request held
  every first run back by that long. A web page where the model should be is now told by
  the first call it answers (:func:`html_error`: one line, not retried), as it always was for
  the runs not probed.
* :func:`connect_failure` recognises, in a failed call, a connection that was never made; the
  provider reports it with :func:`unreachable_message` and, the first time an endpoint is
  called, does not retry it (:class:`~massgen_mcp.providers.litellm_provider.LiteLLMProvider`).
  That catches what the probe cannot: a pool worker's calls, and a server that stopped.

Why it fails is told only ahead of a run, and only for endpoints the person at this machine
chose: on their command line, in their script, in their own config or the project's that a
run without a team reads. A model's call (MCP, ``/v1``) that names a ``base_url`` (in
``models``, ``base_url`` or a ``config`` file it names) is not probed ahead: eight URLs per
call, each answered "refused", "does not resolve" or "not TLS" within milliseconds and with no
record, would let whoever steers the calling model map which hosts and ports this machine
reaches. Its run connects itself, as any run does, and a failed call says which URL could not
be reached and what to do, not why (:func:`unreachable_message` without a reason): what a run
has always revealed, no more. A malformed URL (no host, a port that is not a number) is
refused before the run either way: that is read from the text, not the network.
"""

from __future__ import annotations

import asyncio
import os
import re
import socket
import ssl
import time
from urllib.parse import urlsplit

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ErrorKind, ProviderError
from massgen_mcp.core.secrets import redact
from massgen_mcp.providers.kinds import provider_of

PROBE_TIMEOUT_S = 5.0
NOT_OPENAI = "it answered with an HTML page"
_HTML = re.compile(r"<!doctype html|<html[\s>]", re.IGNORECASE)
PROBE_TTL_S = 300.0
OLLAMA_DEFAULT = "http://localhost:11434"
_OLLAMA = ("ollama", "ollama_chat")
_reached: dict[tuple[str, str, int], float] = {}  # (scheme, host, port) -> when it answered


def endpoint_of(agent: AgentSpec) -> str | None:
    """The URL the agent's calls go to when it is one the user runs (its ``base_url``, or
    Ollama's), else None (a hosted provider's API, the embedded model, a CLI)."""
    if agent.cli or agent.model.startswith("local/"):
        return None
    if agent.base_url:
        return agent.base_url
    if provider_of(agent) in _OLLAMA:  # where litellm sends an ollama/... model
        return os.environ.get("OLLAMA_API_BASE") or OLLAMA_DEFAULT
    return None


def shown(url: str) -> str:
    """The URL as it may be shown: no user or password (a token may be either), no fragment
    (``#access_token=...``), no credential in its query.

    The user part is masked up to the *last* ``@`` before any parsing: a password with an
    unescaped ``/``, ``?``, ``#`` or ``@`` ends a parser's host part early and would be shown
    as the host or path. A ``@`` in a path or query masks more than it needs to, which only
    hides text, never shows a secret."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        scheme, rest = "", url
    if "@" in rest:
        rest = "***@" + rest.rsplit("@", 1)[1]
    return redact(scheme + sep + rest.split("#", 1)[0])  # and credential-named parameters


def unreachable_message(agent: AgentSpec, url: str | None, why: str | None) -> str:
    """One line: which endpoint, why it failed (``why``: None when the reason is not to be
    told, see the module's docstring), and what to do."""
    because = f" ({why})" if why else ""
    if url is None:
        return (f"cannot reach the {provider_of(agent) or 'provider'} API{because}; check this "
                "machine's network connection and proxy settings")
    if provider_of(agent) in _OLLAMA:
        model = agent.model.split("/", 1)[1]
        elsewhere = "fix base_url" if agent.base_url else "set OLLAMA_API_BASE to where it runs"
        return (f"cannot reach Ollama at {shown(url)}{because}; start it (ollama serve) and "
                f"pull the model (ollama pull {model}), or {elsewhere} (agent {agent.id})")
    todo = "fix base_url" if why and "TLS" in why else "start the server there, or fix base_url"
    return f"cannot reach {shown(url)}{because}; {todo} (agent {agent.id}, {agent.model})"


def connect_failure(exc: BaseException) -> str | None:
    """Why a call's connection could not be made (refused, a name that does not resolve, a
    failed TLS handshake), or None if the call failed otherwise (a dropped connection, a
    timeout, an HTTP error: those are worth another try)."""
    chain: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in chain:
        chain.append(current)
        original = getattr(current, "original_exception", None)  # litellm keeps it here
        current = current.__cause__ or current.__context__ or (
            original if isinstance(original, BaseException) else None)
    # httpx's ConnectError, aiohttp's ClientConnector*Error: raised only while connecting.
    if not any(type(e).__name__ == "ConnectError" or type(e).__name__.startswith(
            "ClientConnector") for e in chain):
        return None
    for error in reversed(chain):
        why = _describe(error)
        if why:
            return why
    return "the connection could not be made"


def _describe(error: BaseException) -> str | None:
    if isinstance(error, ConnectionRefusedError):
        return "connection refused: nothing is listening there"
    if isinstance(error, socket.gaierror):
        return "the host name does not resolve"
    if isinstance(error, ssl.SSLError):
        reason = getattr(error, "reason", None) or "handshake failed"
        if reason == "WRONG_VERSION_NUMBER":
            return "the TLS handshake failed: it speaks plain HTTP; use http://"
        return f"the TLS handshake failed: {reason}"
    if isinstance(error, OSError) and error.strerror:
        return error.strerror.lower()
    return None


async def unreachable(agents: list[AgentSpec], *, probe_base_urls: bool = True) -> list[str]:
    """One line per agent whose endpoint does not take a connection now (probed at once,
    each endpoint once); [] when all do. ``probe_base_urls=False`` (a model's call chose
    them): a ``base_url`` is only read, not connected to; Ollama's endpoint from the
    environment is still probed."""
    def probed(agent: AgentSpec) -> bool:
        return probe_base_urls or not agent.base_url

    urls = {url for agent in agents if (url := endpoint_of(agent))}
    to_probe = {url for agent in agents if probed(agent) and (url := endpoint_of(agent))}
    found = dict(zip(to_probe, await asyncio.gather(*(_probe(url) for url in to_probe)),
                     strict=True))
    found.update({url: _malformed(url) for url in urls - to_probe})
    return [unreachable_message(agent, url, why) for agent in agents
            if (url := endpoint_of(agent)) and (why := found[url])]


def _malformed(url: str) -> str | None:
    """What makes ``url`` no place to connect to, read from the text alone (no network)."""
    parts = urlsplit(url)
    try:
        parts.port  # noqa: B018 (raises for a port that is not a number)
    except ValueError:
        return "its port is not a number"
    return None if parts.hostname else "it names no host"


async def _probe(url: str) -> str | None:
    """Why ``url`` takes no connection, or None if it does (or cannot be probed directly)."""
    malformed = _malformed(url)
    if malformed:
        return malformed
    parts = urlsplit(url)
    host, scheme = parts.hostname or "", parts.scheme
    port = parts.port or (443 if scheme == "https" else 80)
    if _behind_proxy(scheme, host):  # the calls go through the proxy: theirs to report
        return None
    key = (scheme, host, port)
    reached = _reached.get(key)
    if reached is not None and time.monotonic() - reached < PROBE_TTL_S:
        return None
    tls: ssl.SSLContext | None = None
    if scheme == "https":  # only whether it speaks TLS: certificates are the call's to judge
        tls = ssl.create_default_context()
        tls.check_hostname = False
        tls.verify_mode = ssl.CERT_NONE
    try:
        async with asyncio.timeout(PROBE_TIMEOUT_S):
            _, writer = await asyncio.open_connection(
                host, port, ssl=tls, server_hostname=host if tls else None)
    except TimeoutError:
        return f"no connection within {PROBE_TIMEOUT_S:g} s"
    except OSError as exc:  # ssl.SSLError and socket.gaierror are OSErrors
        return _describe(exc) or "the connection could not be made"
    writer.close()  # the connect was the question: nothing is sent, nothing awaited
    _reached[key] = time.monotonic()
    return None


def is_html(text: str) -> bool:
    """Whether a reply's text is a web page (not a model's or an API's answer): the providers
    report such a failed call in one line, not as the page."""
    return bool(_HTML.search(text[:512]))


def html_error(status: int | None) -> ProviderError:
    """A call a web page answered (a web server, a wrong port, a ``base_url`` without its
    ``/v1``): what no retry changes, in one line. The probe before a run only connects, so
    this is how every run learns it."""
    return ProviderError(f"the endpoint is not an OpenAI-compatible endpoint ({NOT_OPENAI}); "
                         "fix base_url (such a server's URL usually ends in /v1)",
                         status_code=status, kind=ErrorKind.BAD_REQUEST)


def _behind_proxy(scheme: str, host: str) -> bool:
    """Whether the calls to ``host`` go through a proxy (HTTPS_PROXY, ...), as litellm's
    HTTP clients read it from the environment; the direct connection is then no evidence."""
    import urllib.request  # ~4 ms: only when a run names a server

    proxies = urllib.request.getproxies()
    return bool(proxies.get(scheme) or proxies.get("all")) and not urllib.request.proxy_bypass(
        host)
