"""Start a review, for every face: ``massgen-mcp review``, the MCP tool ``review_changes``
and the Python API's ``review``. Each names the change the same way (nothing: the working
tree against HEAD; ``staged``, ``base``, ``commit``, ``patch``, ``paths``); ``patch`` is the
diff's text for a model or a program, which hold a pull request's diff, and a file or ``-``
(stdin) for the command line (``patch_file``).

The rules the command line applies stay the same here (:func:`collect`, :func:`review_spec`,
:func:`tools_withheld`); what this adds is the confinement of a model's call. The MCP
server's workspace (the client's root) is *confined*: its caller is a model, whose
arguments may come from whatever it read. Then the repository must be the workspace itself
(a workspace inside a larger repository would have the team read the files around it), and
``paths`` are relative and stay inside it; a patch's own paths are checked by
:func:`~massgen_mcp.review.patch.check_patch_paths` for every face.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from massgen_mcp.core.agent import AgentSpec
from massgen_mcp.core.errors import ConfigError, SessionStateError, UntrustedConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import Severity
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.review.changes import Changes, collect, repository
from massgen_mcp.review.diff import MAX_DIFF_BYTES, NARROW
from massgen_mcp.review.fit import diff_room, refuse_embedded
from massgen_mcp.review.parts import Part, merged_result, split
from massgen_mcp.review.patch import inside
from massgen_mcp.review.request import (
    chosen_team,
    review_estimate,
    review_spec,
    tools_withheld,
)
from massgen_mcp.service import ConsensusService, StartedRun
from massgen_mcp.team import consent
from massgen_mcp.team.context_files import Workspace


@dataclass(frozen=True)
class ChangeToReview:
    """What to review, as the MCP tool and the Python API take it (at most one field set;
    none: the working tree's changes against HEAD, staged and unstaged)."""

    staged: bool = False
    base: str | None = None
    commit: str | None = None
    patch: str | None = None  # a unified diff, as text
    paths: Sequence[str] = ()
    patch_file: str | None = None  # the command line's: a .patch/.diff file, or '-' (stdin)


@dataclass
class ReviewStarted:
    """A review that has started: its run, what it reviews, and what the caller should be
    told (files left out of the diff, workspace tools withheld)."""

    run: StartedRun
    changes: Changes
    notes: list[str] = field(default_factory=list)
    threshold: Severity = Severity.MAJOR
    # A diff over what one run sends: each part and its run (``run`` is the first's), and
    # what no part holds; :func:`finish_review` merges them.
    parts: list[tuple[Part, StartedRun]] = field(default_factory=list)
    left_out: tuple[str, ...] = ()


async def start_review(service: ConsensusService, workspace: Workspace,
                       change: ChangeToReview, *, focus: str | None = None,
                       models: list[str] | None = None, config: str | None = None,
                       base_url: str | None = None, options: RunOptions | None = None,
                       threshold: Severity = Severity.MAJOR,
                       split_ok: bool = True) -> ReviewStarted:
    """Collect ``change`` in the repository at ``workspace``'s root, and start its review
    through ``service`` with the team and limits as ``run_consensus`` takes them.
    ``threshold``: the least severity of an agreed finding that requests changes;
    ``split_ok``: a diff over what one run sends may be reviewed in parts (a face that
    follows one session, the MCP tool, refuses it instead, in one line)."""
    given = [name for name, value in (("staged", change.staged), ("base", change.base),
                                      ("commit", change.commit),
                                      ("patch", change.patch is not None
                                       or change.patch_file is not None),
                                      ("paths", list(change.paths))) if value]
    if len(given) > 1:
        raise ConfigError(f"{given[1]}: give one of staged, base, commit, patch or paths, "
                          f"not {' and '.join(given)}")
    if workspace.confined:
        await check_confined(workspace.root, change.paths)
    try:
        changes = await collect(workspace.root, staged=change.staged, base=change.base,
                                commit=change.commit, patch_text=change.patch,
                                patch=change.patch_file, paths=list(change.paths))
    except ConfigError as exc:
        if not workspace.confined and change.patch is None:
            raise  # the command line's own words ("--base: ...")
        # The caller here named the fields without dashes.
        raise ConfigError(str(exc).removeprefix("--")) from None
    notes = [f"left out {note}" for note in changes.left_out]
    spec = review_spec(changes, focus, models=models, config=config, base_url=base_url,
                       options=options, threshold=threshold)
    review_workspace = Workspace(changes.root, confined=workspace.confined)
    team = await chosen_team(spec, review_workspace)  # once, for the checks below
    refuse_embedded(team.agents)
    # What one run can send: the run's context limit, or less where a member's context
    # window is known to hold less (each call must fit every member).
    room = min(MAX_DIFF_BYTES, diff_room(team.agents, spec.question) or MAX_DIFF_BYTES)
    if workspace.confined and change.paths:
        check_paths_stay_home(team.agents)
    withheld = tools_withheld(spec, team)
    if withheld:
        notes.append("the team reviewed the diff without reading the repository (workspace "
                     f"tools off): {'; '.join(withheld)}; name the team (models or config) "
                     "to give it the tools")
        spec = review_spec(changes, focus, models=models, config=config, base_url=base_url,
                           options=options, tools=False, threshold=threshold)
    if len(changes.diff.encode()) <= room:
        floor = review_estimate([spec], team)  # a budget below it: refused
        notes.append(f"estimate: {floor.words()}")
        run = await service.start(spec, review_workspace)
        return ReviewStarted(run, changes, notes, threshold=threshold)
    if not split_ok:
        raise ConfigError(f"diff: {changes.described} is {len(changes.diff.encode()):,} "
                          f"bytes, more than one review run holds ({room:,} for this team); "
                          f"{NARROW}, or run massgen-mcp review in a terminal, which reviews "
                          "it in parts")
    pieces = split(changes.diff, room)
    if not pieces.parts:
        raise ConfigError(f"diff: every hunk of {changes.described} is more than one review "
                          f"run holds ({room:,} bytes for this team); {NARROW}, or choose "
                          "models with larger context windows")
    specs = [review_spec(changes, focus, models=models, config=config, base_url=base_url,
                         options=options, tools=not withheld, threshold=threshold,
                         part=(k, len(pieces.parts), part))
             for k, part in enumerate(pieces.parts, 1)]
    floor = review_estimate(specs, team)
    notes += [f"left out {note}" for note in pieces.left_out]
    notes.append(f"the diff is {len(changes.diff.encode()):,} bytes, more than one review run "
                 f"holds ({room:,} for this team): reviewed in {len(specs)} parts by file, "
                 "at once")
    notes.append(f"estimate: {floor.words()}")
    runs: list[StartedRun] = []
    try:
        for part_spec in specs:
            runs.append(await service.start(part_spec, review_workspace))
    except BaseException:
        for started in runs:  # nothing half-started: the parts begun so far are stopped
            await service.cancel(started.session_id)
        raise
    return ReviewStarted(runs[0], changes, notes, threshold=threshold,
                         parts=list(zip(pieces.parts, runs, strict=True)),
                         left_out=(*changes.left_out, *pieces.left_out))


async def finish_review(service: ConsensusService, begun: ReviewStarted) -> ResultRecord:
    """Wait for ``begun``'s run, or all its parts' runs, to end, and return its result
    (a review in parts: merged, :func:`massgen_mcp.review.parts.merged_result`). A part
    cancelled (the CLI's Ctrl-C cancels the first) cancels the others: the review stops."""
    if not begun.parts:
        await service.wait(begun.run.session_id, None, until_done=True)
        return await service.result(begun.run.session_id)

    stopping: list[bool] = []  # the others are being cancelled: once (a task cancelled
    # twice is cut off while it closes its record)

    async def one(run: StartedRun) -> ResultRecord:
        await service.wait(run.session_id, None, until_done=True)
        result = await service.result(run.session_id)
        if result.status is RunStatus.CANCELLED and not stopping:  # Ctrl-C on one part
            stopping.append(True)
            for _, other in begun.parts:
                if other is not run:
                    with contextlib.suppress(SessionStateError):  # another process runs it
                        await service.cancel(other.session_id)
        return result

    try:
        results = await asyncio.gather(*(one(run) for _, run in begun.parts))
    except asyncio.CancelledError:
        await asyncio.gather(*(service.cancel(run.session_id) for _, run in begun.parts),
                             return_exceptions=True)
        raise
    return merged_result([part for part, _ in begun.parts], results, begun.left_out,
                         begun.threshold, begun.changes.described)


def check_paths_stay_home(agents: Sequence[AgentSpec]) -> None:
    """Refuse a model's call that names ``paths`` for a team with an agent at a foreign
    endpoint (neither on this machine nor its provider's API): the call chose the files
    (any file in the repository, tracked or not), as it chooses ``context_files``, which
    :func:`massgen_mcp.team.consent.check_call` refuses for such a team whatever the
    consent: no file's consent covers files a call picks."""
    abroad = [f"agent {agent.id!r} at {url}" for agent in agents
              if (url := consent.foreign_endpoint(agent))]
    if abroad:
        raise UntrustedConfigError(
            f"paths: {', '.join(abroad)} would receive the files a call names. A model's "
            "call cannot send files it picks to an endpoint that is neither on this machine "
            "nor the provider's own API: review them yourself (massgen-mcp review PATH), or "
            "review the change (no paths)")


async def check_confined(root: Path, paths: Sequence[str]) -> None:
    """Refuse what a model's call may not review from the workspace ``root``: a workspace
    that is not the top of its repository, and ``paths`` that are absolute or lead out of
    it (links followed). Each refusal is one line naming the field."""
    top = root.resolve()
    try:
        found = await repository(top)
    except ConfigError:
        raise ConfigError(f"repository: the workspace {top} (the client's root) is not a git "
                          "repository; open the project's folder in the host, or run "
                          "massgen-mcp review there") from None
    if found != top:
        raise ConfigError(f"repository: the workspace {top} is inside the repository "
                          f"{found}, and a review reads the whole repository; open {found} "
                          "in the host (its root), or run massgen-mcp review there")
    for name in paths:
        if not name.strip() or "\x00" in name:
            raise ConfigError(f"paths: {name!r} is not a file path")
        inside(top, name, "paths")  # the rule a patch's paths follow: relative, no '..', in
