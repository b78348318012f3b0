"""Shared fixtures: an isolated record folder for every test, and scripted model servers.

The helpers the tests call (teams, runs, records) are in :mod:`tests.helpers`.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Iterator
from pathlib import Path

# Hypothesis and anyio import some of their modules lazily, in the middle of a test (hypothesis
# its optimiser, anyio every name on first use: `anyio.open_process` deep inside an MCP stdio
# client), and pytest rewrites (ast.parse) every module of a plugin it imports. CPython 3.11.7
# can then fail that parse with "SystemError: AST constructor recursion depth mismatch" (fixed
# upstream in later 3.11 releases); which test meets it first depends on the order the xdist
# workers run tests in. Import them here, at a shallow stack, once.
import anyio
import hypothesis.internal.conjecture.optimiser  # noqa: F401
import pytest

import massgen_mcp
from massgen_mcp.providers.kinds import PROVIDER_KEY_ENV
from massgen_mcp.providers.litellm_provider import load_litellm
from massgen_mcp.team import discover
from massgen_mcp.testing.scripted import Policy, ScriptedServer, agree
from tests.helpers import Scripted, unused_port

# The harnesses the tests share, beside tests.helpers: loaded as plugins, their fixtures reach
# every test (no test module imports another) and their asserts are rewritten. A harness comes
# after the ones it imports, or pytest cannot rewrite those.
pytest_plugins = ["tests.servers", "tests.openai_api", "tests.pool_harness", "tests.coding_clis",
                  "tests.sleepers", "tests.mcp_servers", "tests.npm_clients", "tests.scheduling",
                  "tests.wheels"]

for _name in dir(anyio):  # every lazy name of anyio, now (see the comment on the imports)
    getattr(anyio, _name)

# A shell runs a background job (`bash .ci/run &`) with SIGINT ignored, and an ignored signal
# stays ignored in every child: the tests that press Ctrl-C on a server or a run would then
# wait forever. Take SIGINT back, so the processes the tests start get its default.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


def pytest_configure(config: pytest.Config) -> None:
    """Compile massgen_mcp's bytecode once, before any test starts a child process. When the
    environment forbids writing it (PYTHONDONTWRITEBYTECODE, set on some CI images) and the
    package is an editable checkout, which pip never compiles, every server, worker and CLI
    process the suite starts compiles our modules from source: ~0.2 s of CPU each, ~150 times."""
    if sys.dont_write_bytecode and not hasattr(config, "workerinput"):  # the controller
        import compileall

        compileall.compile_dir(Path(massgen_mcp.__file__).parent, quiet=1)


# The smoke subset (`pytest -m smoke`): what a fresh install must do before anything else, run by
# .ci/run on what a user's pip resolves today (README commands 1 and 2, no constraints) and on
# the lowest versions pyproject.toml allows, beside the whole suite on the pinned set.
SMOKE = (
    # a real stdio host
    "tests/system/test_clients.py::test_inspector_strict_tools_list_over_stdio",
    "tests/system/test_transports.py::test_official_sdk_client_over_stdio",  # a run over stdio
    "tests/server/test_server.py::test_tools_list_matches_snapshot",
    "tests/server/test_server.py::test_run_poll_result",  # the scripted team, both protocol eras
    "tests/cli/test_cli.py::test_run_prints_final_answer_and_progress",
    "tests/providers/test_streaming.py::"
    "test_providers_other_than_openai_at_a_base_url_stream_through_litellm",
    # the embedded model answers
    "tests/providers/test_embedded.py::test_offline_consensus_with_no_keys",
    "tests/pool/test_pool.py::test_a_run_started_on_one_front_end_is_followed_on_another",
)


@pytest.hookimpl(tryfirst=True)  # before -m and --deselect filter the items
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark the smoke subset; one list here, so no test module carries the marker by hand. A
    renamed test must not shrink the subset in silence: `-m smoke` refuses to run without it."""
    found, files = set(), set()
    for item in items:
        files.add(item.nodeid.split("::")[0])
        if (nodeid := item.nodeid.split("[")[0]) in SMOKE:
            item.add_marker(pytest.mark.smoke)
            found.add(nodeid)
    missing = {test for test in SMOKE if test.split("::")[0] in files
               or not (config.rootpath / test.split("::")[0]).is_file()} - found
    if config.option.markexpr == "smoke" and missing:
        raise pytest.UsageError(f"smoke tests not found (renamed? update SMOKE in "
                                f"tests/conftest.py): {', '.join(sorted(missing))}")


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` (pyproject's addopts): a test process per core, plus one. A good part of the
    suite's time a test waits on a child process or a socket and leaves its core idle; on 2
    cores, 2 workers took 5 min 58 s, 3 took 5 min 13 s, 4 took 5 min 33 s.
    ``PYTEST_XDIST_AUTO_NUM_WORKERS`` still decides when it is set."""
    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # pytest-xdist's own hook reads it
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 1


@pytest.fixture(autouse=True)
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test writes its records to its own folder, never to ./.massgen, and default-team
    discovery sees no local model server and no user config of the developer's machine."""
    folder = tmp_path / "massgen-home"
    monkeypatch.setenv("MASSGEN_HOME", str(folder))
    monkeypatch.setenv("MASSGEN_LOCAL_PORTS", str(unused_port()))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))  # a server's early log
    monkeypatch.setenv("MASSGEN_CLIS", "none")  # the developer's own CLIs stay out
    # The suite runs a test process per core, so the embedded model always shares its cores:
    # one decoding thread is 2-3x faster there than one per core (providers.llamacpp_seats
    # .decode_threads says why).
    monkeypatch.setenv("MASSGEN_LOCAL_THREADS", "1")
    discover._probe_cache.clear()
    return folder


@pytest.fixture
def nothing_available(monkeypatch: pytest.MonkeyPatch) -> None:
    """No provider keys and no embedded model: a run must name its team."""
    for names in PROVIDER_KEY_ENV.values():
        for name in names:
            monkeypatch.delenv(name, raising=False)
    monkeypatch.setattr("massgen_mcp.providers.llamacpp_provider.embedded_model_name",
                        lambda: None)


@pytest.fixture(scope="session")
def _litellm_loaded() -> None:
    load_litellm()  # once per test session, so no test pays the ~3 s import on its clock


@pytest.fixture
def scripted(_litellm_loaded: None) -> Iterator[Scripted]:
    """Start scripted servers: ``server = scripted(policy, latency_s=0.0)``; ``chunk_chars``
    sets the pieces a stream comes in (see :class:`ScriptedServer`)."""
    servers: list[ScriptedServer] = []

    def start(policy: Policy = agree, latency_s: float = 0.0,
              chunk_chars: int = 4) -> ScriptedServer:
        server = ScriptedServer(policy, latency_s=latency_s, chunk_chars=chunk_chars).__enter__()
        servers.append(server)
        return server

    yield start
    for server in servers:
        server.__exit__()


@pytest.fixture
def task_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """fastmcp Clients that declare the MCP tasks extension, for this test only: once
    ``fastmcp_tasks`` is imported every Client declares it, and a pool front end then runs
    each run_consensus as a task, whose plain call_tool returns only when the run ends."""
    from fastmcp.client import extension_hooks
    from fastmcp_tasks.client import _build_tasks_client_extension

    monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])
    extension_hooks.register_internal_client_extension_factory(_build_tasks_client_extension)


@pytest.fixture(autouse=True)
def plain_clients(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other test's Clients declare no tasks, whatever an earlier test in the same
    process imported (under pytest-xdist that order is not the file order)."""
    from fastmcp.client import extension_hooks

    monkeypatch.setattr(extension_hooks, "_internal_client_extension_factories", [])
