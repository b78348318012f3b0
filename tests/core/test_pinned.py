"""The one pinned download (``core/pinned.fetch_pinned``), filled over real HTTP from a server on
127.0.0.1 as both of its callers fill it: the file is installed only once its size and SHA-256
match the pin, and nothing half-written is left behind by a wrong file, a file too long or a
cut connection (a resumable download keeps its part, and only its part)."""

from __future__ import annotations

import hashlib
import http.server
import os
import stat
import subprocess
import sys
import threading
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from massgen_mcp.core.files import UnsafeFileError
from massgen_mcp.core.pinned import PinnedPart, PinRefused, fetch_pinned, part_path
from massgen_mcp.testing.scripted import STOP_POLL_S

BLOB = bytes(range(256)) * 4_099  # ~1 MB, not a whole number of any chunk size
SHA256 = hashlib.sha256(BLOB).hexdigest()


@dataclass
class Served:
    """What the server sends: ``body``, cut after ``cut_after`` bytes when it is set."""

    body: bytes = BLOB
    cut_after: int | None = None
    url: str = ""


@pytest.fixture
def served() -> Iterator[Served]:
    state = Served()

    class Handler(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:  # quiet
            pass

        def do_GET(self) -> None:
            start = int((self.headers.get("Range") or "bytes=0-")[6:].rstrip("-"))
            body = state.body[start:]
            self.send_response(206 if start else 200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if state.cut_after is not None:
                self.wfile.write(body[:state.cut_after])
                self.wfile.flush()
                self.close_connection = True  # the rest never comes
                return
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever,
                              kwargs={"poll_interval": STOP_POLL_S}, daemon=True)
    thread.start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/model.gguf"
    yield state
    server.shutdown()
    server.server_close()


def from_url(url: str) -> Callable[[PinnedPart], None]:
    """Fill a part from ``url``, from where it stands (a Range request when it has bytes)."""
    def fill(part: PinnedPart) -> None:
        have = part.have
        headers = {"Range": f"bytes={have}-"} if have else {}
        with httpx.stream("GET", url, headers=headers, timeout=30) as response:
            response.raise_for_status()
            for chunk in response.iter_bytes():
                part.write(chunk)
    return fill


def fetch(target: Path, url: str, *, resumable: bool = False) -> os.stat_result:
    """``target`` fetched from ``url``, pinned to :data:`BLOB`."""
    return fetch_pinned(target, size=len(BLOB), sha256=SHA256, fill=from_url(url),
                        resumable=resumable)


def test_the_pinned_file_is_installed_private_and_alone(served: Served, tmp_path: Path) -> None:
    target = tmp_path / "model.gguf"
    found = fetch(target, served.url)
    assert target.read_bytes() == BLOB
    assert os.listdir(tmp_path) == ["model.gguf"], "no part is left"
    info = target.lstat()
    assert (info.st_ino, info.st_size) == (found.st_ino, found.st_size)
    if sys.platform != "win32":
        assert stat.S_IMODE(info.st_mode) == 0o600


@pytest.mark.parametrize("resumable", [False, True], ids=["plain", "resumable"])
def test_a_wrong_file_leaves_nothing_behind(served: Served, tmp_path: Path,
                                            resumable: bool) -> None:
    served.body = BLOB[:-1] + b"!"
    target = tmp_path / "model.gguf"
    with pytest.raises(PinRefused, match="does not match its pinned SHA-256") as refused:
        fetch(target, served.url, resumable=resumable)
    assert refused.value.reason == "mismatch"
    assert refused.value.got == hashlib.sha256(served.body).hexdigest()
    assert os.listdir(tmp_path) == []


def test_a_file_too_long_is_refused_at_the_first_byte_over(served: Served,
                                                           tmp_path: Path) -> None:
    served.body = BLOB + b"more"
    with pytest.raises(PinRefused, match=f"more than the pinned {len(BLOB):,} bytes") as refused:
        fetch(tmp_path / "model.gguf", served.url, resumable=True)
    assert refused.value.reason == "too_big"
    assert os.listdir(tmp_path) == []


def test_an_interrupted_download_leaves_nothing_behind(served: Served, tmp_path: Path) -> None:
    served.cut_after = 300_000
    with pytest.raises(httpx.TransportError):
        fetch(tmp_path / "model.gguf", served.url)
    assert os.listdir(tmp_path) == []


def test_an_interrupted_resumable_download_keeps_only_its_part(served: Served,
                                                               tmp_path: Path) -> None:
    target = tmp_path / "model.gguf"
    served.cut_after = 300_000
    with pytest.raises(httpx.TransportError):
        fetch(target, served.url, resumable=True)
    assert os.listdir(tmp_path) == ["model.gguf.part"], "never installed half-done"
    assert part_path(target).stat().st_size == 300_000
    served.cut_after = None
    fetch(target, served.url, resumable=True)
    assert target.read_bytes() == BLOB and os.listdir(tmp_path) == ["model.gguf"]


def test_a_part_longer_than_the_pin_is_started_again(served: Served, tmp_path: Path) -> None:
    target = tmp_path / "model.gguf"
    part_path(target).write_bytes(b"x" * (len(BLOB) + 1))
    fetch(target, served.url, resumable=True)
    assert target.read_bytes() == BLOB


@pytest.mark.skipif(sys.platform == "win32", reason="a link takes privilege on Windows")
def test_a_link_planted_at_the_part_is_never_written_through(served: Served,
                                                            tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("keep me\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    target = cache / "model.gguf"
    part_path(target).symlink_to(victim)
    with pytest.raises(UnsafeFileError):
        fetch(target, served.url, resumable=True)
    assert victim.read_text() == "keep me\n" and part_path(target).is_symlink()
    assert not target.exists()


@pytest.mark.skipif(sys.platform == "win32", reason="a link takes privilege on Windows")
def test_a_link_at_the_target_is_replaced_not_followed(served: Served, tmp_path: Path) -> None:
    victim = tmp_path / "bashrc"
    victim.write_text("keep me\n")
    cache = tmp_path / "cache"
    cache.mkdir()
    target = cache / "model.gguf"
    target.symlink_to(victim)
    fetch(target, served.url)
    assert not target.is_symlink() and target.read_bytes() == BLOB
    assert victim.read_text() == "keep me\n"


def test_a_part_whose_writer_was_killed_outright_is_removed_by_the_next_download(
        served: Served, tmp_path: Path) -> None:
    """A process killed outright leaves its plain part (~94 MB for the embedded model); the
    next plain download of the file removes it. A part whose process still runs (another
    download going on) is left alone, as is anything not named as a part is."""
    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead = tmp_path / f".model.gguf.{finished.pid}.{'a' * 16}.part"
    live = tmp_path / f".model.gguf.{os.getpid()}.{'b' * 16}.part"
    other = tmp_path / ".model.gguf.notes.part"
    for path in (dead, live, other):
        path.write_bytes(b"half a model")
    fetch(tmp_path / "model.gguf", served.url)
    assert sorted(os.listdir(tmp_path)) == sorted(["model.gguf", live.name, other.name])
