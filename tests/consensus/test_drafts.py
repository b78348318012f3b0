"""Live drafts (issue 32 §1): what an agent is writing shows in the status while its call
streams, redacted, and is never written: the record keeps answers, not drafts.

The scripted server streams its replies slowly (``chunk_delay_s`` between pieces), so a
watcher sees each draft grow before the answer exists; nothing here sleeps.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from massgen_mcp.consensus.drafts import Drafts
from massgen_mcp.core.records import CallPurpose, EventType, RequestRecord
from massgen_mcp.core.run_state import StatusRecord
from massgen_mcp.core.secrets import redact_excerpt, register_secret
from massgen_mcp.executors.local import LocalExecutor
from massgen_mcp.providers.registry import ProviderRouter
from massgen_mcp.records.store import SessionStore
from massgen_mcp.service import ConsensusService
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.testing.policies import ChatRequest, Reply, agree, answer
from massgen_mcp.testing.scripted import ScriptedServer
from tests.helpers import team_for

SECRET = "sk-draft-test-0123456789abcdefXYZ"
LONG = ("The answer is 42, because " + "six times seven " * 20 + SECRET
        + " and so on" * 40 + ".")  # the masked key shows for a while (0.4 s)


def slow_answers(req: ChatRequest) -> Reply:
    if not req.vote_labels and not req.is_final and not req.is_check:
        return answer(LONG)
    return agree(req)


def local(home: Path) -> ConsensusService:
    store = SessionStore(home)
    return ConsensusService(store, LocalExecutor(store, ProviderRouter()), Workspace(home))


async def test_a_draft_shows_while_it_streams_and_is_never_written(home: Path) -> None:
    register_secret(SECRET)
    with ScriptedServer(slow_answers, chunk_chars=8, chunk_delay_s=0.01) as server:
        service = local(home)
        run = await service.executor.start(RequestRecord(question="What is 6*7?"),
                                           team_for(server, ("a", "b")))
        seen: list[StatusRecord] = []
        async with asyncio.timeout(60):
            async for status in service.watch(run.session_id):
                seen.append(status)
        folder = service.folder(run.session_id)
        assert all(r.body.get("stream") for r in server.requests)

    drafting = [s for s in seen if any(a.draft for a in s.agents.values())]
    assert drafting, "no status showed a draft"
    first = drafting[0]
    assert first.answers == []  # the text showed before any answer was recorded
    draft = next(a.draft for a in first.agents.values() if a.draft is not None)
    assert draft.purpose is CallPurpose.ANSWER and draft.tokens >= 1
    assert draft.first_token_s is not None and draft.first_token_s <= draft.elapsed_s
    assert 0 < len(draft.text) <= 400 and draft.chars >= len(draft.text)
    # Drafts of the whole run: growing, redacted, and each a piece of what was answered.
    texts = [a.draft.text for s in drafting for a in s.agents.values() if a.draft is not None]
    assert all(SECRET not in t for t in texts)
    assert any("***" in t for t in texts), "the secret's place never showed, masked"
    assert max(s.drafts_revision for s in seen) > 1
    # Once an answer is recorded, its author's draft is gone.
    for status in seen:
        for aid, agent in status.agents.items():
            if agent.draft is not None and agent.draft.purpose is CallPurpose.ANSWER:
                assert agent.answers == 0, (aid, status.revision)
    assert seen[-1].done and all(a.draft is None for a in seen[-1].agents.values())

    on_disk = "".join(p.read_text() for p in folder.rglob("*") if p.is_file())
    assert "six times seven" in on_disk  # the answers are recorded...
    assert '"draft"' not in on_disk and "drafts_revision" not in on_disk  # ...drafts never
    calls = [e for e in SessionStore(home).read_events(run.session_id)
             if e.type is EventType.CALL]
    assert calls and all(e.first_token_s is not None and e.tokens_per_s for e in calls)



@given(st.text(), st.lists(st.integers(1, 9), min_size=1), st.booleans())
def test_an_answer_streamed_as_tool_call_json_shows_as_its_text(
        content: str, steps: list[int], ascii_only: bool) -> None:
    """However the arguments are cut into pieces (an escape, a surrogate pair split in two),
    the draft shows the answer's own text, as the recorded answer will read."""
    wire = json.dumps({"content": content}, ensure_ascii=ascii_only)
    drafts = Drafts()
    drafts.begin("a", CallPurpose.ANSWER)
    at, i = 0, 0
    while at < len(wire):
        piece = wire[at:at + steps[i % len(steps)]]
        drafts.add("a", piece, 1)
        at, i = at + len(piece), i + 1
    shown = drafts.records()["a"]
    expected = redact_excerpt(content[-1600:], cut_start=len(content) > 1600)[-400:]
    assert shown.text == expected if content else shown.text == ""
    assert shown.chars == len(content)


def test_a_vote_shows_its_reason_and_plain_text_shows_as_written() -> None:
    """The embedded model's grammar writes ``{ "action": "vote", "answer" : "A1", ...``: the
    keys are protocol; the draft shows nothing until the reason (or the answer's text)."""
    drafts = Drafts()
    for aid, text in (("a", '{"answer": "A1", "reason": "clearest"}'), ("b", "Plain words."),
                      ("c", '{ "action": "vote", "answer" : "A1", "reas'),
                      ("d", '{ "action" : "new_answer", "content" : "Par')):
        drafts.begin(aid, CallPurpose.EVALUATE)
        drafts.add(aid, text, 3)
    assert {aid: d.text for aid, d in drafts.records().items()} == {
        "a": "clearest", "b": "Plain words.", "c": "", "d": "Par"}


def test_a_key_is_never_shown_in_part_while_it_streams() -> None:
    """A key being written shows nothing of itself until it is whole (then masked), and a
    key cut by the start of the kept text (many keys, masked short, bring it into view)
    shows nothing of its end: with a key of no known shape (an ``api_key_env`` one)."""
    key = "Zq8fLx2Pq9Wm4Tr7Yb1Nc5Hd3Gv6Ks0Jp"
    register_secret(key)
    drafts = Drafts()
    drafts.begin("a", CallPurpose.ANSWER)
    drafts.add("a", "the key is ", 1)
    for i in range(1, len(key)):
        drafts.add("a", key[i - 1], 1)
        assert drafts.records()["a"].text == "the key is ", i
    drafts.add("a", key[-1] + " and sk-proj-A1b2", 2)  # a key shape, begun
    assert drafts.records()["a"].text == "the key is *** and "
    for lead in range(len(key) + 1):
        drafts.begin("a", CallPurpose.ANSWER)
        drafts.add("a", "y" * lead + (key + " ") * 60, 1)
        shown = drafts.records()["a"].text
        assert not any(key[:n] in shown or key[-n:] in shown for n in range(2, len(key))), (
            lead, shown[:40])
