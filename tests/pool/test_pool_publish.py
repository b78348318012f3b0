"""A worker's live messages reach Redis in batches: each run's messages under one claim as one
script call, fenced as one, in the order they were queued."""

from __future__ import annotations

import asyncio
import json
import logging
import os

import pytest

from massgen_mcp.pool import channel, live
from massgen_mcp.pool.channel import LivePublisher
from massgen_mcp.pool.live import PoolConfig
from tests.pool_harness import REDIS, Pool

pytestmark = pytest.mark.skipif(REDIS is None and not os.environ.get("MASSGEN_REQUIRE_REDIS"),
                                reason="needs redis-server")


def body(n: int) -> str:
    return json.dumps({"n": n})


async def test_a_batch_is_fenced_per_run_and_keeps_each_run_s_order(pool: Pool) -> None:
    config = PoolConfig(pool.url)
    redis = live.connect(config)
    heard: list[dict[str, object]] = []
    subscribed = asyncio.Event()

    def got(data: str) -> None:
        heard.append(json.loads(data))

    feed = asyncio.create_task(channel.subscribe(config, config.live_channel, got,
                                              subscribed.set))
    try:
        await subscribed.wait()
        await redis.set(config.key("fence", "A"), "3")
        await redis.set(config.key("fence", "B"), "7")  # B's claim 5 was taken over
        publisher = LivePublisher(redis, config)
        batch: list[tuple[str, str, str, int | None]] = [
            ("A", "status", body(1), 3), ("B", "event", body(2), 5), ("A", "event", body(3), 3),
            ("C", "status", body(4), None), ("A", "status", body(5), 3),
            ("A", "event", body(6), None), ("A", "event", body(7), 3)]
        await publisher._write(batch)
        await publisher._write([("D", "event", body(8), None)])  # after the batch, on one
        async with asyncio.timeout(10):  # connection: the batch was all heard by then
            while not heard or heard[-1]["sid"] != "D":
                await asyncio.sleep(0.01)
        kinds = [(m["sid"], *next((k, v) for k, v in m.items() if k != "sid")) for m in heard]
        assert [k for k in kinds if k[0] == "A"] == [
            ("A", "status", {"n": 1}), ("A", "event", {"n": 3}), ("A", "status", {"n": 5}),
            ("A", "event", {"n": 6}), ("A", "event", {"n": 7})]
        assert [k[0] for k in kinds].count("C") == 1
        assert "B" not in [k[0] for k in kinds]  # fenced out, every message
        assert json.loads(await redis.get(config.key("status", "A")) or "") == {"n": 5}
        assert await redis.get(config.key("status", "B")) is None
        assert json.loads(await redis.get(config.key("status", "C")) or "") == {"n": 4}
    finally:
        feed.cancel()
        await asyncio.gather(feed, return_exceptions=True)
        await redis.aclose()


async def test_a_flood_of_forged_steering_replies_ends_the_wait_on_time(
        pool: Pool, caplog: pytest.LogCaptureFixture) -> None:
    """Anyone who can write to Redis can push to a note's reply list (its id is in the
    published request). A front end waiting for the reply skips what no worker sends, within
    the wait it was given, and says so once: each forged reply restarted the wait and logged
    a warning, so a writer that kept pushing held ``steer`` for ever (with the warnings
    captured here, 1 GB in ten minutes) (red team, round 5)."""
    from massgen_mcp.pool.steering import RedisNotes, _reply_key

    config = PoolConfig(pool.url)
    redis = live.connect(config)
    notes = RedisNotes(redis, config, "01M8K2QF3RTNKPFS19EKDDWT3X")
    note_id = "0" * 32
    try:
        await redis.rpush(_reply_key(config, note_id), *(["not a reply"] * 20_000),
                          "x" * 100_000)
        with caplog.at_level(logging.WARNING, logger="massgen_mcp.pool.steering"):
            assert await notes.reply(note_id, timeout_s=0.5) is None
        assert 1 <= len(caplog.records) <= 2
    finally:
        await redis.aclose()
