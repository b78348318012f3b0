"""server.json for the MCP Registry: valid against the registry's published schema (vendored in
tests/fixtures, the 2025-12-11 one that ``$schema`` names), named after the repository by
release/render.py as the release workflow runs it, with the README's ``mcp-name`` marker."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from massgen_mcp._version import __version__
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV

ROOT = Path(__file__).resolve().parents[2]
SCHEMA = ROOT / "tests" / "fixtures" / "mcp-server-schema-2025-12-11.json"
SAMPLE = "octo-org/massgen-mcp"


def validate(server: dict[str, Any]) -> None:
    schema = json.loads(SCHEMA.read_text(encoding="utf-8"))
    assert server["$schema"] == schema["$id"]
    jsonschema.Draft7Validator(
        schema, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER).validate(server)


def render(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(ROOT / "release" / "render.py"), "--out",
                           str(tmp_path / "out"), *args], capture_output=True, text=True,
                          timeout=60, env={k: v for k, v in os.environ.items()
                                           if k != "GITHUB_REPOSITORY"})


def load(path: Path) -> Any:
    return json.loads(path.read_text(encoding="utf-8"))


def test_the_committed_server_json_is_valid_and_declares_the_keys_as_optional_secrets() -> None:
    server = load(ROOT / "server.json")
    validate(server)
    assert server["version"] == __version__
    (package,) = server["packages"]
    assert (package["registryType"], package["identifier"], package["version"],
            package["runtimeHint"], package["transport"]) == (
        "pypi", "massgen-mcp", __version__, "uvx", {"type": "stdio"})
    declared = {variable["name"]: variable for variable in package["environmentVariables"]}
    assert set(declared) == {names[0] for names in PROVIDER_KEY_ENV.values()}
    assert all(v["isSecret"] is True and v["isRequired"] is False for v in declared.values())


def test_the_release_names_the_server_after_its_repository(tmp_path: Path) -> None:
    done = render(tmp_path, "--repository", SAMPLE)
    assert done.returncode == 0, done.stderr
    server = load(tmp_path / "out" / "server.json")
    validate(server)
    assert server["name"] == f"io.github.{SAMPLE}"
    assert server["repository"] == {"url": f"https://github.com/{SAMPLE}", "source": "github"}
    readme = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert re.findall(r"<!-- mcp-name: (\S+) -->", readme) == [server["name"]]
    # The checkout's own files are the templates, untouched.
    assert load(ROOT / "server.json")["name"] == "io.github.OWNER/REPO"
    assert "<!-- mcp-name: io.github.OWNER/REPO -->" in (ROOT / "README.md").read_text(
        encoding="utf-8")


def test_the_bundle_the_release_attaches_is_listed_with_its_hash(tmp_path: Path) -> None:
    bundle = tmp_path / f"massgen-mcp-{__version__}.mcpb"
    bundle.write_bytes(b"a bundle")
    done = render(tmp_path, "--repository", SAMPLE, "--mcpb", str(bundle))
    assert done.returncode == 0, done.stderr
    server = load(tmp_path / "out" / "server.json")
    validate(server)
    mcpb = next(p for p in server["packages"] if p["registryType"] == "mcpb")
    assert mcpb["identifier"] == (f"https://github.com/{SAMPLE}/releases/download/"
                                  f"v{__version__}/{bundle.name}")
    assert mcpb["fileSha256"] == hashlib.sha256(b"a bundle").hexdigest()


@pytest.mark.parametrize(("args", "said"), [
    ((), "no repository: pass --repository OWNER/NAME"),
    (("--repository", "OWNER/REPO"), "expected a GitHub OWNER/NAME"),
    (("--repository", "a b/c"), "expected a GitHub OWNER/NAME"),
    (("--repository", SAMPLE, "--tag", "v9.9.9"), "does not name the version"),
    (("--repository", SAMPLE, "--mcpb", "missing.mcpb"), "no such file"),
])
def test_a_release_without_its_facts_stops_with_one_line_and_writes_nothing(
        tmp_path: Path, args: tuple[str, ...], said: str) -> None:
    done = render(tmp_path, *args)
    assert done.returncode == 2 and said in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1
    assert not (tmp_path / "out").exists()
