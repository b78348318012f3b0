"""Who learns why a server takes no connection: the person who named it, before the run (the
fast, specific error of tests/system/test_errors_first.py), but not a model's call, which could
otherwise map which hosts and ports this machine reaches; and URLs shown in any message never
carry a user, a password or a fragment, however the URL is written."""

from __future__ import annotations

import asyncio
import select
import socket
import threading
from collections.abc import AsyncIterator
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import pytest
from fastmcp import Client
from fastmcp.client.transports import FastMCPTransport

from massgen_mcp.api.python import follow
from massgen_mcp.core.errors import EndpointUnreachableError
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.spec import RunSpec
from massgen_mcp.providers.endpoints import shown
from massgen_mcp.server.app import create_server
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.scripted import ScriptedServer, agree
from tests.helpers import FAST, Scripted, text_of, unused_port

McpClient = Client[FastMCPTransport]
# What a failed connection to a base_url says when its reason is not to be told.
GENERIC = "; start the server there, or fix base_url (agent agent_a, openai/a)"
REASONS = ("refused", "resolve", "TLS", "within", "could not be made")
NEVER_S = 20.0  # only ever the bound of a failing test's wait, never a pace


@pytest.mark.parametrize(("url", "expected"), [
    ("http://admin:S3cr3t/Pass@10.0.0.5:8000/v1", "http://***@10.0.0.5:8000/v1"),
    ("http://admin:S3cr3t#Pass@10.0.0.5:8000/v1", "http://***@10.0.0.5:8000/v1"),
    ("http://admin:S3cr3t?Pass@10.0.0.5:8000/v1", "http://***@10.0.0.5:8000/v1"),
    ("http://admin:S3c@r3t@10.0.0.5:8000/v1", "http://***@10.0.0.5:8000/v1"),
    ("https://tok-S3cr3t@host/v1", "https://***@host/v1"),
    ("admin:S3cr3t/x@10.0.0.5:8000/v1", "***@10.0.0.5:8000/v1"),  # no scheme
    ("http://host:8000/v1#access_token=S3cr3t", "http://host:8000/v1"),
    ("http://u:S3cr3t@host/v1?api_key=S3cr3t#S3cr3t", "http://***@host/v1?api_key=***"),
    ("http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"),
])
def test_shown_masks_a_password_however_it_is_written(url: str, expected: str) -> None:
    assert shown(url) == expected
    assert "S3cr3t" not in shown(url)


def test_a_malformed_url_is_shown_without_its_password(home: Path, tmp_path: Path) -> None:
    """A password with an unescaped '/' ends the parser's host part early: the port is not a
    number. The message says so without the password (it used to be shown whole)."""
    service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
    with pytest.raises(EndpointUnreachableError) as info:
        asyncio.run(service.start(RunSpec(question="q", models=[
            "openai/a@http://admin:S3cr3t/Pass@10.0.0.5:8000/v1"])))
    assert str(info.value) == ("cannot reach http://***@10.0.0.5:8000/v1 (its port is not a "
                               "number); start the server there, or fix base_url "
                               "(agent agent_a, openai/a)")


async def test_the_person_who_names_a_server_is_told_why_before_the_run(
        home: Path, tmp_path: Path) -> None:
    """The CLI's and a script's service (a workspace not confined): probed, with the reason,
    and no record written."""
    port = unused_port()
    service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
    with pytest.raises(EndpointUnreachableError) as info:
        await service.start(RunSpec(question="q", models=[f"openai/a@http://127.0.0.1:{port}/v1"]))
    assert "(connection refused: nothing is listening there)" in str(info.value)
    assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[McpClient]:
    async with Client(create_server(root=tmp_path)) as c:
        yield c


async def finished_errors(client: McpClient, session_id: str) -> list[str]:
    await client.call_tool("get_status", {"session_id": session_id, "wait_s": 60})
    result = (await client.call_tool("get_result", {"session_id": session_id})
              ).structured_content
    assert result is not None and result["status"] == RunStatus.FAILED, result
    return list(result["errors"])


async def test_a_model_call_cannot_map_hosts_and_ports(client: McpClient,
                                                       scripted: Scripted) -> None:
    """The red team's scan (/tmp/redteam/scan/scan.py): closed, unresolvable and plain-HTTP
    endpoints in one call. None is probed ahead (the call starts a run, as it did before the
    probe existed), and each failed agent says only which URL it could not reach."""
    closed, plain = unused_port(), scripted(agree).port
    urls = [f"http://127.0.0.1:{closed}/v1", "http://nothing.invalid:8000/v1",
            f"https://127.0.0.1:{plain}/v1"]
    for url in urls:
        started = await client.call_tool("run_consensus", {
            "question": "q", "models": [f"openai/a@{url}"], "options": FAST, "wait_s": 0},
            raise_on_error=False)
        assert not started.is_error, text_of(started.content[0])
        assert started.structured_content is not None
        errors = await finished_errors(client, started.structured_content["session_id"])
        assert any(f"cannot reach {url}{GENERIC}" in e for e in errors), errors
        assert not any(reason in e for e in errors for reason in REASONS), errors


async def test_a_model_call_is_still_told_why_ollama_is_not_running(
        client: McpClient, home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Ollama's endpoint comes from the user's environment, not the call: probed ahead."""
    port = unused_port()
    monkeypatch.setenv("OLLAMA_API_BASE", f"http://127.0.0.1:{port}")
    refused = await client.call_tool("run_consensus", {"question": "q",
                                                       "models": ["ollama/llama3"]},
                                     raise_on_error=False)
    assert refused.is_error
    assert (f"cannot reach Ollama at http://127.0.0.1:{port} (connection refused: nothing is "
            "listening there)") in text_of(refused.content[0])
    assert not (home / "sessions").exists() or not list((home / "sessions").iterdir())


class SlowToRefuse(ScriptedServer):
    """An OpenAI-compatible server that holds any request without messages (what a probe
    asking the server something would send) until the run's first model call has arrived,
    then says whether that request's client was still waiting for it: a run whose calls
    waited for such a probe would have given up on it first."""

    def __init__(self) -> None:
        self.first_call = threading.Event()
        self.held: list[bool] = []  # per held request: its client still waited at the call
        super().__init__(agree)

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        base = super()._handler_class()
        server = self

        class Handler(base):  # type: ignore[misc,valid-type]
            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", 0))
                if length > 2:  # a model call
                    server.first_call.set()
                    return super().do_POST()  # type: ignore[no-any-return]
                self.rfile.read(length)
                server.first_call.wait(NEVER_S)
                readable, _, _ = select.select([self.connection], [], [], 0)
                gone = bool(readable) and not self.connection.recv(1, socket.MSG_PEEK)
                server.held.append(not gone)
                self.close_connection = True

        return Handler


async def test_a_server_slow_to_answer_a_probe_does_not_hold_the_run_back(
        home: Path, tmp_path: Path) -> None:
    """The probe before a run is the connect alone: the run's first model call never waits
    for a server to answer it (it waited up to 2 s for the reply to an empty request)."""
    server = SlowToRefuse()
    with server:
        service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
        started = await service.start(RunSpec(question="q", models=[
            f"openai/{m}@{server.base_url}" for m in "ab"], options=FAST))
        result = await follow(service, started.session_id)
        await service.aclose()
    assert result.status == RunStatus.COMPLETED, result.errors
    assert server.first_call.is_set()
    assert all(server.held), "the run's calls waited until a probe's client gave up on it"
