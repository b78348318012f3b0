"""One provider router per process: services and ``arun`` calls share its per-provider bound
and its loaded embedded model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import massgen_mcp
from massgen_mcp.core.spec import build_team
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers import registry
from massgen_mcp.providers.base import Bounded
from massgen_mcp.service import ConsensusService
from massgen_mcp.testing.scripted import agree
from tests.helpers import FAST, Scripted


@pytest.fixture
def fresh_router(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A shared router made for this test (bound 2) and closed after it."""
    monkeypatch.setenv("MASSGEN_MAX_PARALLEL_PER_PROVIDER", "2")
    registry.close_shared_router()
    yield
    registry.close_shared_router()


async def test_services_share_one_router_and_its_bound(fresh_router: None, home: Path,
                                                       tmp_path: Path) -> None:
    one, two = ConsensusService.local(tmp_path / "one"), ConsensusService.local(tmp_path / "two")
    assert isinstance(one.executor, LocalExecutor) and isinstance(two.executor, LocalExecutor)
    assert one.executor.provider is two.executor.provider is registry.shared_router()
    agent = build_team({"agents": [{"id": "a", "model": "openai/a",
                                    "base_url": "http://127.0.0.1:9/v1"}]}).agents[0]
    router = registry.shared_router()
    assert isinstance(router, Bounded)
    assert router.slots(agent) is router.slots(agent)  # one semaphore per endpoint
    await one.aclose()
    await two.aclose()


async def test_concurrent_arun_calls_never_exceed_the_bound(fresh_router: None, scripted: Scripted,
                                                            home: Path, tmp_path: Path) -> None:
    server = scripted(agree, latency_s=0.05)
    models = [f"openai/{m}@{server.base_url}" for m in "abc"]
    results = await asyncio.gather(*(
        massgen_mcp.arun(f"q{i}", models=models, options=FAST, home=tmp_path / f"h{i}")
        for i in range(2)))
    assert [r.status.value for r in results] == ["completed", "completed"]
    assert server.max_in_flight == 2  # one bound of 2 across both runs, not one per run
