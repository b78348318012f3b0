"""Stronger offline models, pulled from the Hugging Face hub when the user asks for one.

The embedded model that needs no step at all, SmolLM2-135M (:mod:`.local_model`), is too small
to get simple facts right. The models here are 0.5-1.5 B parameters, Apache-2.0, one GGUF
file each, and each is pinned three ways: the hub revision (a commit, so ``main`` moving
cannot change the file), the size and the SHA-256. A file is used only once it matches.

A pull is always the user's own act (``massgen-mcp models pull NAME``), never a side effect
of a run: a run started from an MCP host has no terminal to show a 1 GB download on, and would
time out long before it ended. The download:

* goes through :func:`massgen_mcp.core.pinned.fetch_pinned`, as the embedded model's does:
  a private part file opened through no link, never more than the pinned size, the whole
  file's size and SHA-256 checked before it is renamed into place (else the part is deleted
  and nothing is installed), so a reader sees all of it or nothing, and a link at the file's
  name is replaced, never written through;
* resumes: the part is ``<file>.part`` in the cache, kept when a pull is interrupted, and a
  later pull asks the hub for the rest with an HTTP ``Range`` header (a dropped connection
  is also resumed at once, a few times, within one pull);
* is recorded: ``<file>.sha256`` records which file matched, and only a plain file with
  that record counts as pulled (a file of the right size is not enough);
* writes through no link: the lock too is opened with ``O_NOFOLLOW`` and must be a plain
  file of this user's;
* is safe in two processes at once: an exclusive lock on ``.<file>.lock`` (``flock``, or
  ``msvcrt.locking`` on Windows: :mod:`massgen_mcp.core.portable`) makes the second wait for
  the first, then find the file there.

``MASSGEN_HF_ENDPOINT`` points the download at a mirror (as ``HF_ENDPOINT`` does for
huggingface_hub; the tests use it for a local stand-in). It is an environment setting, never
read from a config file, so a cloned repository cannot redirect it; and the pins hold
whatever the endpoint serves. ``MASSGEN_MODELS_FILE`` adds the user's own pinned models.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import stat
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields
from pathlib import Path
from typing import Any

import yaml

from massgen_mcp.core import portable
from massgen_mcp.core.errors import ConfigError, ModelDownloadError
from massgen_mcp.core.files import UnsafeFileError, open_own, read_bytes_safely, replace_file
from massgen_mcp.core.pinned import (
    PinnedPart,
    PinRefused,
    fetch_pinned,
    part_path,
    sha256_of,
)
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.providers.endpoints import shown

ATTEMPTS = 3  # connections per pull; each must bring bytes for the next one to be tried
CONNECT_TIMEOUT_S = 30.0
READ_TIMEOUT_S = 60.0  # the longest silence mid-file before the connection counts as dropped
MARKER_MAX_BYTES = 4096  # a marker is one short line of JSON

Progress = Callable[[int, int], None]  # (bytes on disk, bytes in the file)


@dataclass(frozen=True)
class HubModel:
    """One GGUF file on the hub, pinned by revision, size and SHA-256."""

    name: str  # what follows local/ in a model string
    title: str
    repo: str
    revision: str
    file: str
    size: int
    sha256: str
    license: str

    def url(self, endpoint: str) -> str:
        return f"{endpoint}/{self.repo}/resolve/{self.revision}/{self.file}"

    @property
    def size_text(self) -> str:
        return f"{self.size / 1e9:.1f} GB" if self.size >= 1e9 else f"{self.size / 1e6:.0f} MB"


# Qwen's own GGUF repositories (Apache-2.0). The revisions, sizes and SHA-256 are the hub's
# Git LFS pointers at those commits, as pinned alike by several independent projects.
CATALOG = (
    HubModel(name="qwen2.5-1.5b", title="Qwen2.5-1.5B-Instruct, Q4_K_M",
             repo="Qwen/Qwen2.5-1.5B-Instruct-GGUF",
             revision="91cad51170dc346986eccefdc2dd33a9da36ead9",
             file="qwen2.5-1.5b-instruct-q4_k_m.gguf", size=1_117_320_736,
             sha256="6a1a2eb6d15622bf3c96857206351ba97e1af16c30d7a74ee38970e434e9407e",
             license="Apache-2.0"),
    HubModel(name="qwen2.5-0.5b", title="Qwen2.5-0.5B-Instruct, Q4_K_M",
             repo="Qwen/Qwen2.5-0.5B-Instruct-GGUF",
             revision="9217f5db79a29953eb74d5343926648285ec7e67",
             file="qwen2.5-0.5b-instruct-q4_k_m.gguf", size=491_400_032,
             sha256="74a4da8c9fdbcd15bd1f6d01d621410d31c6fc00986f5eb687824e7b93d7a9db",
             license="Apache-2.0"),
)
RECOMMENDED = "qwen2.5-1.5b"

_NAME = re.compile(r"[a-z0-9][a-z0-9._-]{0,63}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


def catalog() -> dict[str, HubModel]:
    """Every model ``models pull`` knows: the built-in ones, then the user's own
    (``MASSGEN_MODELS_FILE``)."""
    known = {m.name: m for m in CATALOG}
    path = SETTINGS.models_file.read()
    if path is not None:
        for model in _read_models_file(path):
            if model.name in known:
                raise ConfigError(f"{path}: model {model.name!r} is already in the catalog; "
                                  "give yours another name")
            known[model.name] = model
    return known


def find(name: str) -> HubModel | None:
    return catalog().get(name)


def require(name: str) -> HubModel:
    """The catalog's model called ``name``, or a ConfigError that lists the names."""
    model = find(name)
    if model is None:
        raise ConfigError(f"model {name!r} is not in the catalog; choose one of "
                          f"{', '.join(catalog())} (massgen-mcp models list)")
    return model


def _read_models_file(path: Path) -> list[HubModel]:
    """The models of a ``MASSGEN_MODELS_FILE``: a YAML list of mappings with every field of
    :class:`HubModel`; each problem is named with its entry and field."""
    try:
        entries = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise ConfigError(f"MASSGEN_MODELS_FILE={path}: cannot be read as YAML "
                          f"({type(exc).__name__}); fix the file or unset the variable"
                          ) from None
    if not isinstance(entries, list):
        raise ConfigError(f"{path}: expected a list of models (- name: ..., repo: ..., "
                          f"revision: ..., file: ..., size: ..., sha256: ..., license: ...)")
    names = [f.name for f in fields(HubModel)]
    models, problems = [], []
    for i, entry in enumerate(entries):
        if not isinstance(entry, dict):
            problems.append(f"[{i}]: expected a mapping")
            continue
        missing = [n for n in names if n not in entry and n != "title"]
        unknown = sorted(set(map(str, entry)) - set(names))
        problems += [f"[{i}].{n}: required" for n in missing]
        problems += [f"[{i}].{n}: unknown field" for n in unknown]
        if missing or unknown:
            continue
        problems += [f"[{i}].{p}" for p in _entry_problems(entry)]
        if not any(p.startswith(f"[{i}].") for p in problems):
            models.append(HubModel(**{**entry, "title": str(entry.get("title") or entry["file"]),
                                      "sha256": str(entry["sha256"]).lower()}))
    if problems:
        raise ConfigError(f"{path}: " + "; ".join(problems))
    return models


def _entry_problems(entry: dict[str, Any]) -> list[str]:
    problems = []
    if not (isinstance(entry["name"], str) and _NAME.fullmatch(entry["name"])):
        problems.append("name: lowercase letters, digits, '.', '-' or '_'")
    for key in ("repo", "revision", "file", "license"):
        if not isinstance(entry[key], str) or not entry[key] or ".." in entry[key]:
            problems.append(f"{key}: a non-empty string")
    if isinstance(entry["file"], str) and ("/" in entry["file"] or "\\" in entry["file"]):
        problems.append("file: a file name, without folders")
    if not isinstance(entry["size"], int) or isinstance(entry["size"], bool) or entry["size"] < 1:
        problems.append("size: the file's size in bytes")
    if not (isinstance(entry["sha256"], str) and _HEX64.fullmatch(entry["sha256"].lower())):
        problems.append("sha256: 64 hex digits")
    return problems


def pulled(model: HubModel, folder: Path) -> Path | None:
    """The model's file in ``folder`` if a pull checked it: a plain file (never a link), of
    the pinned size, whose marker says its SHA-256 matched the pin. The marker names the file
    it vouches for (inode and modification time), so a file put in its place later, even of
    the same size, is not trusted. Only ``stat`` calls and a small read: this is asked on
    every ``doctor`` and run, where hashing 1.1 GB again would take seconds."""
    path = folder / model.file
    try:
        found = path.lstat()
    except OSError:
        return None
    if not stat.S_ISREG(found.st_mode) or found.st_size != model.size:
        return None
    return path if _read_marker(path) == _stamp(model, found) else None


def pull(model: HubModel, folder: Path, *, on_progress: Progress | None = None,
         on_wait: Callable[[], None] | None = None) -> Path:
    """Download ``model`` into ``folder`` unless it is there; return its path (blocking).

    ``on_progress`` hears the bytes on disk as they grow; ``on_wait`` is called once if
    another process is pulling the same file and this one waits for it."""
    import httpx

    folder.mkdir(parents=True, exist_ok=True)
    target = folder / model.file
    with _exclusive(folder / f".{model.file}.lock", on_wait):
        done = pulled(model, folder)
        if done is not None:
            return done
        found = _checked_in_place(model, target)
        if found is not None:
            mark_checked(model, target, found)
            return target
        url = model.url(SETTINGS.hf_endpoint.read())
        timeout = httpx.Timeout(READ_TIMEOUT_S, connect=CONNECT_TIMEOUT_S)
        try:
            with httpx.Client(timeout=timeout, follow_redirects=True) as client:
                found = fetch_pinned(
                    target, size=model.size, sha256=model.sha256, resumable=True,
                    fill=lambda part: _download(client, url, model, part, on_progress))
        except UnsafeFileError:
            raise _not_plain(part_path(target)) from None
        except PinRefused as exc:
            raise _refused(model, url, exc) from None
        mark_checked(model, target, found)
        return target


def _download(client: Any, url: str, model: HubModel, part: PinnedPart,
              on_progress: Progress | None) -> None:
    """Fill ``part`` from ``url``, resuming a dropped connection at once while each brings
    bytes (up to :data:`ATTEMPTS` connections)."""
    import httpx

    for attempt in range(1, ATTEMPTS + 1):
        before = part.have
        try:
            _fetch_rest(client, url, model, part, on_progress)
            return
        except (httpx.TransportError, httpx.DecodingError) as exc:
            if attempt == ATTEMPTS or part.have == before:
                raise _interrupted(model, url, part.have, exc) from None
        except (httpx.HTTPError, httpx.InvalidURL) as exc:  # redirects; a bad URL
            raise _interrupted(model, url, part.have, exc) from None


def _interrupted(model: HubModel, url: str, have: int, exc: Exception) -> ModelDownloadError:
    """The error of a download that stopped; the URL shown without the credentials a mirror's
    may carry (``https://user:token@mirror``), as in every message here."""
    if not have:
        return ModelDownloadError(
            f"{model.name}: could not download {shown(url)} ({type(exc).__name__}); check "
            f"the network or proxy (HTTPS_PROXY), or {SETTINGS.hf_endpoint.env} if you set "
            "it, and pull again")
    return ModelDownloadError(
        f"{model.name}: the download from {shown(url)} was interrupted at {have:,} of "
        f"{model.size:,} bytes ({type(exc).__name__}); run the same command again to resume")


def _fetch_rest(client: Any, url: str, model: HubModel, part: PinnedPart,
                on_progress: Progress | None) -> None:
    """Append what ``part`` lacks, asking for it with a Range header; whatever arrived is on
    disk when this returns or raises (a later attempt resumes from it)."""
    have = part.have
    if have == model.size:
        return
    headers = {"Range": f"bytes={have}-"} if have else {}
    with client.stream("GET", url, headers=headers) as response:
        if response.status_code == 206:
            if not response.headers.get("content-range", "").startswith(f"bytes {have}-"):
                raise ModelDownloadError(f"{model.name}: {shown(url)} answered a resumed "
                                         f"download with the wrong part; delete {part.path} "
                                         "and pull again")
        elif response.status_code == 200:
            have = 0  # the server ignored the Range header: it sends the whole file
        else:
            raise ModelDownloadError(
                f"{model.name}: {shown(url)} answered HTTP {response.status_code}; check the "
                f"network (or {SETTINGS.hf_endpoint.env}, if you set it) and pull again")
        part.restart(have)
        for chunk in response.iter_bytes():  # as they come: a cut keeps every byte
            have = part.write(chunk)
            if on_progress is not None:
                on_progress(have, model.size)
        part.sync()


def _refused(model: HubModel, url: str, exc: PinRefused) -> ModelDownloadError:
    """The error of a file that is not the pinned one (the part is deleted by then)."""
    if exc.reason == "too_big":
        return ModelDownloadError(f"{model.name}: {shown(url)} sent more than the pinned "
                                  f"{model.size:,} bytes; refused and deleted")
    return ModelDownloadError(
        f"{model.name}: the file from {shown(url)} does not match its pinned SHA-256 "
        f"(got {(exc.got or '')[:16]}..., expected {model.sha256[:16]}...); it was deleted "
        "and nothing was installed. Pull again; if it happens again, the server is not "
        "serving the pinned file")


def _checked_in_place(model: HubModel, path: Path) -> os.stat_result | None:
    """The model's file, if it is already in place and matches its pin though its marker is
    missing or stale (a cache copied from elsewhere, or a pull stopped between the rename and
    the marker): hashing it again (1.1 GB: a few seconds) beats downloading it again. Read
    through no link, and only a plain file."""
    try:
        fd = portable.open_nofollow(path, os.O_RDONLY)
    except OSError:
        return None
    with os.fdopen(fd, "rb") as handle:
        found = os.fstat(fd)
        if (stat.S_ISREG(found.st_mode) and found.st_size == model.size
                and sha256_of(handle) == model.sha256):
            return found
    return None


def _stamp(model: HubModel, found: os.stat_result) -> str:
    """What the marker of a checked file holds: the pin it matched, and which file that was."""
    return json.dumps({"sha256": model.sha256, "size": found.st_size, "inode": found.st_ino,
                       "mtime_ns": found.st_mtime_ns}) + "\n"


def _marker(path: Path) -> Path:
    return path.with_name(f"{path.name}.sha256")


def mark_checked(model: HubModel, path: Path, found: os.stat_result) -> None:
    """Record that the file ``found`` at ``path`` matched its pin (:func:`replace_file`,
    synced to disk first): a reader sees a whole marker or none, and a link planted at the
    marker's name is replaced, never written through."""
    replace_file(_marker(path), _stamp(model, found), mode=0o600, durable=True)


def _read_marker(path: Path) -> str | None:
    """The marker of ``path``, if it is a plain file (a link or a FIFO there is no marker)."""
    try:
        return read_bytes_safely(_marker(path), MARKER_MAX_BYTES).decode("utf-8", "replace")
    except OSError:
        return None



def _open_lock(path: Path) -> int:
    """A read-write descriptor of the lock file ``path``, created if missing, only if it is a
    plain file of this user's with no other name (:func:`open_own`): a link planted as the
    lock, to ``~/.bashrc`` say, would otherwise be created or locked through."""
    try:
        return open_own(path, mode=0o600, mine=True)
    except UnsafeFileError:
        raise _not_plain(path) from None


def _not_plain(path: Path) -> ModelDownloadError:
    """A cache file (the part, the lock) that is a link or another kind of file."""
    return ModelDownloadError(f"{path} is not a plain file of this user's (it is a link, or "
                              "another kind of file); delete it and pull again")


@contextlib.contextmanager
def _exclusive(lock: Path, on_wait: Callable[[], None] | None) -> Iterator[None]:
    """Hold an exclusive lock on ``lock``; if another process holds it, say so once and
    wait. The lock file stays: removing it would let a third process lock a new file while
    the second still holds the old one."""
    fd = _open_lock(lock)
    try:
        if not portable.lock(fd, wait=False):
            if on_wait is not None:
                on_wait()
            portable.lock(fd)
        yield
    finally:
        os.close(fd)  # releases the lock
