"""Red team, round 5 (issue 65): the pool token's strength (R5) and the rows the first pass
could not reach, each attacked with the input an attacker controls and held here."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from massgen_mcp.core.settings import MAKE_SECRET, secret_weakness
from tests.servers import TOKEN, free_port, server_env

WEAK_TOKEN = "abc"
STRONG = "Vq3x-9LmZr_T8wKc2YhP0dNf"  # 24 characters of the url-safe alphabet


def _serve(home: Path, *extra: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "massgen_mcp", "serve", "--http", "--port", str(free_port()),
         *extra], env=server_env(home, **env), capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize("token", [WEAK_TOKEN, "a" * 40, "1234567890123456"])
def test_a_weak_token_is_refused_at_start_in_one_line(home: Path, token: str) -> None:
    """R5: the token's PBKDF2 fingerprint sits in the pool's Redis, so a short or repetitive
    token falls to an offline search: serve refuses it, naming the variable and how to make
    a good one, and never prints the token."""
    proc = _serve(home, MASSGEN_MCP_TOKEN=token)
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert line.startswith("massgen-mcp: MASSGEN_MCP_TOKEN is too "), proc.stderr
    assert MAKE_SECRET in line
    assert token not in proc.stderr


def test_a_pool_front_ends_weak_tasks_key_is_refused(home: Path) -> None:
    """R5, the same rule for the pool's other secret: the tasks key's fingerprint (and the
    ciphertexts it makes) sit in Redis too. Refused before Redis is reached."""
    proc = _serve(home, "--redis", f"redis://127.0.0.1:{free_port()}/0",
                  MASSGEN_MCP_TOKEN=TOKEN, FASTMCP_TASKS_ENCRYPTION_KEY="key")
    assert proc.returncode != 0
    line = proc.stderr.strip().splitlines()[-1]
    assert "FASTMCP_TASKS_ENCRYPTION_KEY is too short (3 characters" in line, proc.stderr
    assert "'key'" not in proc.stderr


def test_doctor_says_a_weak_token_will_be_refused(home: Path, monkeypatch: pytest.MonkeyPatch,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    from massgen_mcp.cli.main import main

    monkeypatch.setenv("MASSGEN_MCP_TOKEN", WEAK_TOKEN)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert ("HTTP token:    REFUSED: MASSGEN_MCP_TOKEN is too short (3 characters; at least "
            "16)") in out
    monkeypatch.setenv("MASSGEN_MCP_TOKEN", STRONG)
    assert main(["doctor"]) == 0
    out = capsys.readouterr().out
    assert "HTTP token:    set" in out and STRONG not in out


def test_generated_secrets_pass_and_patterns_do_not() -> None:
    """What the rule accepts: what the docs tell people to run (and the suite's tokens)."""
    import secrets

    for _ in range(200):
        assert secret_weakness(secrets.token_urlsafe(32)) is None
        assert secret_weakness(secrets.token_hex(16)) is None
        assert secret_weakness(secrets.token_hex(32)) is None
    assert secret_weakness(TOKEN) is None and secret_weakness(STRONG) is None
    for weak in ("abc", "x" * 64, "ab" * 20, "0" * 15 + "1", "2024202420242024"):
        assert secret_weakness(weak) is not None, weak
