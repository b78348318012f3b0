"""The release as a user gets it: the wheel, built from this checkout, installed in a fresh venv
outside it (the ``wheel`` and ``wheel_venv`` fixtures; tests/conftest.py loads this module as a
plugin).

The fresh venv installs the wheel and nothing else. Its dependencies are the running test
environment's packages, seen through a folder of links (a ``.pth`` file adds it), less
massgen-mcp itself, whose editable install would otherwise answer for the wheel. pip then
resolves the wheel's declared dependencies against them with ``--no-index``: a dependency the
wheel needs but does not declare fails the import below; one it declares that the test
environment lacks fails the install. The test stays fast and offline; .ci/run's release step
installs the same wheel from the package index too, by pip and by uv, as a user would.
"""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def build_wheel(out: Path) -> Path:
    """``python -m build --wheel`` of this checkout into ``out`` (no isolation: hatchling is in
    the [test] extra, so nothing is fetched)."""
    built = subprocess.run([sys.executable, "-m", "build", "--wheel", "--no-isolation",
                            "--outdir", str(out), str(ROOT)],
                           capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, ("python -m build failed (build and hatchling come with the "
                                   "[test] extra): " + built.stderr[-2000:])
    (wheel,) = out.glob("massgen_mcp-*.whl")
    return wheel


def _ours(name: str) -> bool:
    """An entry of site-packages that belongs to massgen-mcp's own install (the package, its
    dist-info, an editable install's ``.pth`` or finder)."""
    return "massgen_mcp" in name.lower().replace("-", "_")


def dependency_view(into: Path) -> Path:
    """A folder of links to everything the running environment has installed but massgen-mcp."""
    into.mkdir()
    sources = {Path(sysconfig.get_path(kind)) for kind in ("purelib", "platlib")}
    for source in sources:
        for entry in source.iterdir():
            if not _ours(entry.name) and not (into / entry.name).exists():
                (into / entry.name).symlink_to(entry, target_is_directory=entry.is_dir())
    return into


@dataclass(frozen=True)
class WheelVenv:
    root: Path
    bin: Path  # the venv's scripts folder
    outside: Path  # a folder outside the checkout, the processes' working directory

    def env(self, home: Path) -> dict[str, str]:
        """The environment of a process from the venv: no PYTHONPATH (the checkout stays out of
        reach), no provider key, records under ``home``."""
        env = {k: v for k, v in os.environ.items()
               if k not in ("PYTHONPATH", "VIRTUAL_ENV") and not k.endswith("_API_KEY")}
        env.update(MASSGEN_HOME=str(home), PATH=f"{self.bin}{os.pathsep}{env.get('PATH', '')}")
        return env

    def run(self, home: Path, *argv: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(self.bin / argv[0]), *argv[1:]], cwd=self.outside,
                              env=self.env(home), capture_output=True, text=True,
                              timeout=timeout)


def fresh_venv(where: Path, wheel: Path) -> WheelVenv:
    """A new venv at ``where`` with ``wheel`` installed in it, its dependencies from the view."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(where / "venv")],
                   check=True, timeout=120)
    scripts = "Scripts" if sys.platform == "win32" else "bin"
    python = where / "venv" / scripts / "python"
    site = subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_path("
                           "'purelib'))"], check=True, capture_output=True, text=True).stdout
    view = dependency_view(where / "deps")
    Path(site.strip(), "massgen_test_deps.pth").write_text(
        f"import site; site.addsitedir({str(view)!r})\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(python), "install", "-q",
                    "--no-index", "--disable-pip-version-check", str(wheel)],
                   check=True, capture_output=True, text=True, timeout=300)
    outside = where / "elsewhere"
    outside.mkdir()
    return WheelVenv(where / "venv", python.parent, outside)


@pytest.fixture(scope="session")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_wheel(tmp_path_factory.mktemp("dist"))


@pytest.fixture(scope="session")
def wheel_venv(tmp_path_factory: pytest.TempPathFactory, wheel: Path) -> Iterator[WheelVenv]:
    yield fresh_venv(tmp_path_factory.mktemp("wheel-venv"), wheel)
