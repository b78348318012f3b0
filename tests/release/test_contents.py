"""What is published holds nothing of the machine it was built on: the wheel, the sdist and
the MCP bundle, built from a copy of this checkout's files with a developer's usual strays
planted in it (a ``.env`` at the top and in the package, a ``.massgen/`` record folder), hold
none of them, no key-shaped string outside the tests' own fake ones, and no test fixture in
what a user installs."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.release.test_bundle import MCPB, needs_mcpb

ROOT = Path(__file__).resolve().parents[2]
KEY_SHAPED = re.compile(rb"sk-[A-Za-z0-9_-]{16,}|AKIA[0-9A-Z]{16}"
                        rb"|-----BEGIN [A-Z ]*PRIVATE KEY-----")
PLANTED_KEY = "sk-planted-" + "0123456789abcdef"  # split: this file is in the sdist
STRAYS = {".env": f"OPENAI_API_KEY={PLANTED_KEY}\n",
          ".env.local": f"ANTHROPIC_API_KEY={PLANTED_KEY}\n",
          "massgen_mcp/.env": f"OPENAI_API_KEY={PLANTED_KEY}\n",
          "massgen_mcp/.massgen/sessions/run.json": f'{{"key": "{PLANTED_KEY}"}}\n',
          "configs/.massgen/reviews/r.json": f'{{"key": "{PLANTED_KEY}"}}\n',
          ".massgen/sessions/run.json": f'{{"key": "{PLANTED_KEY}"}}\n'}

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def checkout(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The checkout's tracked files as they are now (uncommitted edits included), and the
    strays a developer's checkout holds."""
    copy = tmp_path_factory.mktemp("checkout")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z"], check=True,
                            capture_output=True, timeout=60).stdout.decode().split("\0")
    for name in filter(None, listed):
        source = ROOT / name
        if source.is_file() and not source.is_symlink():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(source, copy / name)
    for name, text in STRAYS.items():
        (copy / name).parent.mkdir(parents=True, exist_ok=True)
        (copy / name).write_text(text)
    return copy


def strays_in(names: list[str]) -> list[str]:
    return [n for n in names if re.search(r"(^|/)(\.env|\.massgen)(/|$|\.)", n)]


def test_the_wheel_and_sdist_hold_no_stray_key_record_or_fixture(checkout: Path,
                                                                  tmp_path: Path) -> None:
    built = subprocess.run([sys.executable, "-m", "build", "--no-isolation", "--outdir",
                            str(tmp_path), str(checkout)], capture_output=True, text=True,
                           timeout=600)
    assert built.returncode == 0, built.stderr[-2000:]
    (wheel,) = tmp_path.glob("*.whl")
    (sdist,) = tmp_path.glob("*.tar.gz")
    with zipfile.ZipFile(wheel) as archive:
        names = archive.namelist()
        assert strays_in(names) == []
        assert not any(n.startswith(("tests/", "bench/", ".ci/")) for n in names)
        for name in names:
            data = archive.read(name)
            assert not KEY_SHAPED.search(data), name
            assert not re.search(rb"/(work|root)/|" + re.escape(str(checkout)).encode(),
                                 data), name
    with tarfile.open(sdist) as archive:
        names = [n.split("/", 1)[1] for n in archive.getnames() if "/" in n]
        assert strays_in(names) == []
        # The tests' and benches' own fake keys (canaries) are the only key-shaped text, and
        # the planted key is nowhere.
        for member in archive.getmembers():
            handle = archive.extractfile(member)
            data = handle.read() if handle else b""
            assert PLANTED_KEY.encode() not in data, member.name
            inside = member.name.split("/", 1)[-1]
            if not inside.startswith(("tests/", "bench/")):
                assert not KEY_SHAPED.search(data), member.name


@needs_mcpb
def test_the_bundle_holds_no_stray_record_or_key(checkout: Path, tmp_path: Path) -> None:
    bundle = tmp_path / "x.mcpb"
    packed = subprocess.run([str(MCPB), "pack", str(checkout), str(bundle)],
                            capture_output=True, text=True, timeout=300)
    assert packed.returncode == 0, packed.stdout + packed.stderr
    with zipfile.ZipFile(bundle) as archive:
        names = archive.namelist()
        assert strays_in(names) == []
        for name in names:
            assert not KEY_SHAPED.search(archive.read(name)), name
