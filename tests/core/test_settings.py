"""The MASSGEN_* settings: read when used, a bad value refused with the variable's name."""

from __future__ import annotations

from pathlib import Path

import pytest

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import default_home
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.providers.llamacpp_seats import cores, decode_threads
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.team.discover import DEFAULT_LOCAL_PORTS, local_ports


def test_settings_are_read_at_call_time(monkeypatch: pytest.MonkeyPatch, tmp_path: Path
                                        ) -> None:
    monkeypatch.setenv("MASSGEN_HOME", str(tmp_path))
    assert default_home() == tmp_path
    monkeypatch.setenv("MASSGEN_LOCAL_PORTS", "1, 2")
    assert local_ports() == (1, 2)
    monkeypatch.setenv("MASSGEN_LOCAL_PORTS", "")  # empty: the default
    assert local_ports() == DEFAULT_LOCAL_PORTS
    monkeypatch.setenv("MASSGEN_MAX_PARALLEL_PER_PROVIDER", "3")
    assert ProviderRouter().max_parallel == 3
    monkeypatch.setenv("MASSGEN_LOCAL_THREADS", "3")
    assert decode_threads() == 3
    monkeypatch.delenv("MASSGEN_LOCAL_THREADS")
    assert decode_threads() == max(1, min(cores() - 1, 8))  # a core left to the process


@pytest.mark.parametrize(("env", "value"), [("MASSGEN_MAX_PARALLEL_PER_PROVIDER", "many"),
                                            ("MASSGEN_MAX_PARALLEL_PER_PROVIDER", "0"),
                                            ("MASSGEN_POOL_RECHECK_S", "0.001"),
                                            ("MASSGEN_LOCAL_PORTS", "11434,x"),
                                            ("MASSGEN_LOCAL_THREADS", "0"),
                                            ("MASSGEN_LOCAL_THREADS", "100000")])
def test_a_bad_value_names_the_variable_and_the_fix(monkeypatch: pytest.MonkeyPatch, env: str,
                                                   value: str) -> None:
    monkeypatch.setenv(env, value)
    setting = next(s for s in SETTINGS.all() if s.env == env)
    with pytest.raises(ConfigError, match=f"{env}=.*expected .*; fix it or unset it"):
        setting.read()
    if env in ("MASSGEN_MAX_PARALLEL_PER_PROVIDER", "MASSGEN_LOCAL_THREADS"):
        with pytest.raises(ConfigError, match=env):  # when the router is made, before any run
            ProviderRouter()


def test_every_setting_has_a_doc_and_a_distinct_variable() -> None:
    names = [s.env for s in SETTINGS.all()]
    assert len(names) == len(set(names))
    assert all(s.doc and s.expected for s in SETTINGS.all())
