"""Live drafts across the pool: published by the worker that runs a session, never stored.

A draft is half an answer, held in memory only (:mod:`massgen_mcp.consensus.drafts`). On a pool
the agents write on a worker and ``get_status`` is asked on any front end, so the worker's
publisher sends each change of a run's drafts (at most every 0.2 s, the engine's throttle) as
a pub/sub message on the live channel, ``{"sid", "drafts": {...}}``: a message is gone once
delivered, whereas a key could reach Redis's disk (RDB, AOF). Nothing of a draft is ever
``SET``.

Each front end keeps the latest drafts it heard per session (:class:`HeardDrafts`) and adds
them to the status it reads, but only while that status says the same worker still runs the
session: drafts never outlive their run, nor a hand-over to another worker. The messages are
read as untrusted (anyone who can write to Redis can publish): a message is size-capped before
it is parsed, validated field by field, must name the session of its envelope, and the front
end keeps at most :data:`MAX_SESSIONS` sessions' drafts, dropping the least recently heard.
"""

from __future__ import annotations

import json
import logging
from collections import OrderedDict
from collections.abc import Mapping
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, field_validator

from massgen_mcp.consensus.drafts import DRAFT_CHARS
from massgen_mcp.consensus.snapshot import with_drafts
from massgen_mcp.core.errors import MassgenError
from massgen_mcp.core.options import MAX_AGENTS
from massgen_mcp.core.records import Phase
from massgen_mcp.core.run_state import Draft, StatusRecord
from massgen_mcp.records.ids import check_session_id

log = logging.getLogger(__name__)

# A message of a full team writing at once is ~4,000 characters; this leaves room for drafts
# that are all escapes (``\\u0001``: six for one) and refuses anything bigger unparsed.
MAX_MESSAGE_CHARS = MAX_AGENTS * (6 * DRAFT_CHARS + 400) + 512
MAX_SESSIONS = 512  # sessions whose drafts a front end keeps: far more than write at once
MAX_NAME = 200  # a worker's name (host#pid) or an agent's id, as a message may carry one

Name = Annotated[str, Field(min_length=1, max_length=MAX_NAME)]


class DraftsMessage(BaseModel):
    """One run's drafts now, as its worker publishes them (replacing the last message)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    session_id: str
    worker: Name  # the worker running the session: its drafts are shown while it still does
    revision: Annotated[int, Field(ge=0)]
    agents: Annotated[dict[Name, Draft], Field(max_length=MAX_AGENTS)]

    @field_validator("agents")
    @classmethod
    def _shown(cls, agents: dict[str, Draft]) -> dict[str, Draft]:
        """No longer than a draft the engine shows (what a front end keeps is bounded)."""
        if any(len(d.text) > DRAFT_CHARS for d in agents.values()):
            raise ValueError(f"a draft's text is longer than {DRAFT_CHARS} characters")
        return agents


def body(session_id: str, worker: str, drafts: Mapping[str, Draft], revision: int) -> str:
    """The ``drafts`` part of a live message (the publisher adds the envelope)."""
    return json.dumps({"session_id": session_id, "worker": worker, "revision": revision,
                       "agents": {aid: d.model_dump(mode="json") for aid, d in drafts.items()}},
                      ensure_ascii=False)


def read(session_id: str, data: str) -> DraftsMessage | None:
    """The drafts message ``data`` (a whole live message for ``session_id``), or None if it is
    not one a worker publishes: too big, not JSON, malformed, or about another session."""
    if len(data) > MAX_MESSAGE_CHARS:
        log.debug("dropped a drafts message of %d characters for %.40s", len(data), session_id)
        return None
    try:
        check_session_id(session_id)
        message = DraftsMessage.model_validate(json.loads(data)["drafts"])
    except (ValueError, KeyError, TypeError, RecursionError, MassgenError) as exc:
        # ValidationError is a ValueError; anyone who can write to Redis can publish
        log.debug("dropped a drafts message for %.40s: %.200s", session_id, exc)
        return None
    if message.session_id != session_id:
        log.debug("dropped a drafts message for %s that names %.40s", session_id,
                  message.session_id)
        return None
    return message


class HeardDrafts:
    """What one front end heard of the pool's drafts: the latest message per session, for at
    most :data:`MAX_SESSIONS` sessions (the least recently heard go first)."""

    def __init__(self, max_sessions: int = MAX_SESSIONS) -> None:
        self.max_sessions = max_sessions
        self._latest: OrderedDict[str, DraftsMessage] = OrderedDict()

    def __len__(self) -> int:
        return len(self._latest)

    def __contains__(self, session_id: object) -> bool:
        return session_id in self._latest

    def heard(self, message: DraftsMessage) -> None:
        """Keep ``message`` as its session's drafts; a message with none forgets them."""
        self._latest.pop(message.session_id, None)
        if not message.agents:
            return
        self._latest[message.session_id] = message
        while len(self._latest) > self.max_sessions:
            self._latest.popitem(last=False)

    def forget(self, session_id: str) -> None:
        self._latest.pop(session_id, None)

    def clear(self) -> None:
        """Messages may have been missed (the feed reconnected): an end of a call among
        them would leave its draft shown, so every draft goes until its worker sends the next
        (within 0.2 s for a call still streaming)."""
        self._latest.clear()

    def merged(self, status: StatusRecord) -> StatusRecord:
        """``status`` with the drafts its worker last published, if that worker still runs
        it; a finished run's drafts are forgotten."""
        if status.done:
            self.forget(status.session_id)
            return status
        message = self._latest.get(status.session_id)
        if (message is None or status.phase is Phase.QUEUED
                or status.worker != message.worker):
            return status
        return with_drafts(status, message.agents, message.revision)
