"""Red team, round 4 (issue 57 item 3): breaks found on this turn's new surfaces, each
reproduced with the input an attacker controls; each now fixed, and held here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from massgen_mcp.testing.scripted import agree
from tests.helpers import Scripted

if TYPE_CHECKING:
    from massgen_mcp.service import ConsensusService

posix_only = pytest.mark.skipif(sys.platform == "win32", reason="FIFOs are POSIX")


async def _finished_session(scripted: Scripted, home: Path, tmp_path: Path, *,
                            inline_key: bool = False) -> tuple[ConsensusService, str]:
    from massgen_mcp.core.spec import RunSpec
    from massgen_mcp.service import ConsensusService
    from massgen_mcp.team.context_files import Workspace

    server = scripted(agree)
    service = ConsensusService.local(home, Workspace(tmp_path, confined=False))
    if inline_key:
        config = tmp_path / "team.yaml"
        config.write_text("agents:\n" + "".join(
            f"  - id: {n}\n    backend: {{type: chatcompletion, model: {n}, base_url: "
            f"'{server.base_url}', api_key: 'EMPTY'}}\n" for n in "ab"))
        spec = RunSpec(question="q", config=str(config))
    else:
        spec = RunSpec(question="q", models=["openai/a", "openai/b"], base_url=server.base_url)
    started = await service.start(spec)
    assert (await service.wait(started.session_id, None)).status == "completed"
    return service, started.session_id


@posix_only
@pytest.mark.parametrize("inline_key", [False, True], ids=["no-keys", "inline-keys"])
async def test_planted_config_file_fifo_does_not_hang_continue(
        scripted: Scripted, home: Path, tmp_path: Path, inline_key: bool) -> None:
    """A record (it may have come with the repository) names any file as the config its
    inline keys come from. A team without inline keys never reads it: continue runs. One
    with them reads it without waiting (a FIFO) and refuses in one line naming --config."""
    from massgen_mcp.core.errors import SessionStateError

    service, sid = await _finished_session(scripted, home, tmp_path, inline_key=inline_key)
    fifo = tmp_path / "cfg.fifo"
    os.mkfifo(fifo)
    request = home / "sessions" / sid / "request.json"
    data = json.loads(request.read_text())
    data["config_file"] = {"path": str(fifo), "sha256": "0" * 64}
    request.write_text(json.dumps(data))
    try:
        # A guard against a hang, not a benchmark: the refusal or the run comes at once.
        follow = service.continue_session(sid, "and then?")
        if not inline_key:
            started = await asyncio.wait_for(follow, 60)
            assert (await service.wait(started.session_id, None)).status == "completed"
        else:
            with pytest.raises(SessionStateError, match="--config FILE"):
                await asyncio.wait_for(follow, 60)
    finally:
        # let a reader still blocked in open() go, so the test process can exit
        with contextlib.suppress(OSError):
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        await service.aclose()


class _ParsedTooMuch(Exception):
    """Raised by the counting json.loads once a read has parsed more than its budget."""


def test_event_tail_parses_bounded_bytes_not_only_bounded_count(
        home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """N6 asked for reads in bounded time. 10,000 events of 3,300 one-letter labels each
    (32 MiB) cost 14.6 s of CPU to read (show, the report resource, resume); the 256 MiB the
    file cap allows, ~2 min. The budget here (16 MiB parsed per read) is a stand-in for
    whatever byte cap the fix picks; parsing stops at it, so the test is fast either way."""
    from massgen_mcp.core.errors import SessionStateError
    from massgen_mcp.records.store import SessionStore

    sid = "01JAAAAAAAAAAAAAAAAAAAAAAA"
    folder = home / "sessions" / sid
    folder.mkdir(parents=True)
    line = json.dumps({"seq": 1, "ts": 1.0, "type": "vote", "labels": ["x"] * 1000},
                      separators=(",", ":")) + "\n"
    (folder / "events.jsonl").write_text(line * 10_000)  # 40 MiB, 10,000 events
    parsed = 0
    real_loads = json.loads

    def counting_loads(text: str | bytes, **kwargs: object) -> object:
        nonlocal parsed
        parsed += len(text)
        if parsed > 16 * 1024 * 1024:
            raise _ParsedTooMuch(parsed)
        return real_loads(text, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(json, "loads", counting_loads)  # the module store.py reads with
    store = SessionStore(home)
    tail = store.read_events_tail(sid)
    assert tail.skipped > 0 and tail.events  # the last events, as many as the bytes allow
    assert tail.skipped + len(tail.events) == 10_000
    with pytest.raises(SessionStateError, match="16 MiB"):  # resume refuses it whole
        store.read_events(sid)


def test_local_hf_folder_readme_makes_no_network_request(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``eval hf:./folder`` reads a cloned folder in place; its README may name data_files
    by URL. The refusal ("convert it to one of them") comes only after ``datasets`` resolved
    the pattern, which lists the URL over HTTP: a beacon, or a GET into the local network."""
    import http.server
    import threading

    pytest.importorskip("datasets")
    from massgen_mcp.core.errors import ConfigError
    from massgen_mcp.evaluation.datasets import load_items

    hits: list[str] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            hits.append(self.path)
            self.send_error(404)

        def do_HEAD(self) -> None:
            self.do_GET()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    folder = tmp_path / "ds"
    folder.mkdir()
    (folder / "test.csv").write_text("question,answer\nq,a\n")
    (folder / "README.md").write_text(
        "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n"
        f"    path: \"http://127.0.0.1:{server.server_port}/beacon/*.csv\"\n---\n")
    monkeypatch.chdir(tmp_path)
    try:
        with pytest.raises(ConfigError):
            load_items("hf:./ds", limit=1)
    finally:
        server.shutdown()
        server.server_close()
    assert hits == []


def test_parquet_list_column_is_not_decoded_a_batch_at_a_time(tmp_path: Path) -> None:
    """N3's fix keeps string columns dictionary-encoded and checks a row's declared bytes
    before decoding it; a ``choices`` column of list<string> (the usual shape) is decoded
    in Arrow by batches of 64 rows first. 64 rows of 16 copies of one 1 MiB value (1.9 KB on
    disk) reached 2.1 GB before the row check refused row 0. Measured here by pyarrow's own
    peak allocation, in a child process, for rows of 2 copies (each row under the cap)."""
    import subprocess

    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    big = "x" * (1 << 20)
    rows = 64
    pq.write_table(pa.table({
        "question": pa.array(["q"] * rows), "answer": pa.array(["A"] * rows),
        "choices": pa.array([[big] * 2] * rows, type=pa.list_(pa.string()))}),
        tmp_path / "lists.parquet", compression="zstd")
    assert (tmp_path / "lists.parquet").stat().st_size < 10_000
    code = ("import pyarrow\nfrom massgen_mcp.evaluation.datasets import load_items\n"
            f"load_items({str(tmp_path / 'lists.parquet')!r}, limit=1)\n"
            "print(pyarrow.default_memory_pool().max_memory())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=True, env={**os.environ})
    peak = int(done.stdout.split()[-1])
    assert peak < 32 * 2**20, f"{peak:,} bytes decoded to take one row"


@pytest.mark.parametrize("number", ["1e400", "0.1000000000000000055", "-1e400"])
def test_install_writes_json_the_host_can_parse(tmp_path: Path, number: str) -> None:
    """A project's .mcp.json (a clone ships it) with ``1e400``, valid JSON, is read as a
    float infinity and written back as ``Infinity``, which JSON.parse refuses; install says
    "massgen added". The TOML side checks its output parses to what it meant; JSON does not."""
    from massgen_mcp.cli.install import install

    project = tmp_path / "proj"
    project.mkdir()
    planted = '{"mcpServers": {}, "x": ' + number + '}\n'
    (project / ".mcp.json").write_text(planted)

    def strict(token: str) -> object:
        raise ValueError(f"not JSON: {token}")

    from massgen_mcp.core.errors import ConfigError

    try:
        install("claude-code", project=project, home=tmp_path / "home")
    except ConfigError as exc:  # a one-line refusal is fine too
        assert "nothing was written" in str(exc) and "\n" not in str(exc)
        assert (project / ".mcp.json").read_text() == planted
        return
    json.loads((project / ".mcp.json").read_text(), parse_constant=strict)


def test_hub_probe_takes_any_hf_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    from massgen_mcp.cli.evaluate import _hub_unreachable

    for name in ("HF_HUB_OFFLINE", "HTTPS_PROXY", "https_proxy", "HTTP_PROXY", "http_proxy",
                 "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("HF_ENDPOINT", "http://[::1")
    assert "could not be reached" in (_hub_unreachable() or "")
