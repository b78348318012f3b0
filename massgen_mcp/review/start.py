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

from massgen_mcp.core.errors import ConfigError, SessionStateError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import ReviewOutput, Severity, Tier
from massgen_mcp.core.records import RunStatus
from massgen_mcp.core.run_state import ResultRecord
from massgen_mcp.review.changes import Changes, collect, repository
from massgen_mcp.review.diff import MAX_DIFF_BYTES, narrow
from massgen_mcp.review.fit import diff_room, refuse_embedded
from massgen_mcp.review.parts import Part, Split, merged_result, split
from massgen_mcp.review.patch import inside
from massgen_mcp.review.request import (
    chosen_team,
    review_estimate,
    review_spec,
    tools_withheld,
)
from massgen_mcp.review.rules import (
    GUIDANCE_QUESTION,
    Guidance,
    check_budget,
    instructions_for,
    load_rules,
    load_rules_at,
    read_guidance,
)
from massgen_mcp.service import ConsensusService, StartedRun
from massgen_mcp.team import consent
from massgen_mcp.team.context_files import Workspace
from massgen_mcp.tools.git import Git


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
    # The repository's default threshold (review.fail_on) when the caller gave none: the
    # command line then exits as with --fail-on.
    fail_on: Severity | None = None
    tier: Tier = Tier.AGREED  # the least tier the verdict counts (a review in parts: merged)
    # A diff over what one run sends: each part and its run (``run`` is the first's), and
    # what no part holds; :func:`finish_review` merges them.
    parts: list[tuple[Part, StartedRun]] = field(default_factory=list)
    left_out: tuple[str, ...] = ()


async def start_review(service: ConsensusService, workspace: Workspace,
                       change: ChangeToReview, *, focus: str | None = None,
                       models: list[str] | None = None, config: str | None = None,
                       base_url: str | None = None, options: RunOptions | None = None,
                       threshold: Severity | None = None,
                       tier: Tier = Tier.AGREED,
                       output: ReviewOutput | None = None,
                       split_ok: bool = True) -> ReviewStarted:
    """Collect ``change`` in the repository at ``workspace``'s root, and start its review
    through ``service`` with the team and limits as ``run_consensus`` takes them.
    ``threshold``: the least severity of a counted finding that requests changes (None: the
    repository's ``review.fail_on``, else major); ``tier``: the least tier counted (agreed,
    or unconfirmed too); ``output``: the command line's format and ``--fail-on``, recorded
    for ``resume``; ``split_ok``: a diff over what one run sends may be reviewed in parts (a
    face that follows one session, the MCP tool, refuses it instead, in one line).

    The repository's own rules (:mod:`massgen_mcp.review.rules`) apply where the caller
    leaves a choice open (focus, threshold, team) and narrow what is sent (ignore, budget);
    its guidance files join the context only where the workspace tools may go too."""
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
        top = await repository(workspace.root)
        # Against a base, the base's rules: the head's may ignore the head's own changes.
        loaded = (await load_rules_at(Git(top), change.base) if change.base is not None
                  else await asyncio.to_thread(load_rules, top))
        changes = await collect(workspace.root, staged=change.staged, base=change.base,
                                commit=change.commit, patch_text=change.patch,
                                patch=change.patch_file, paths=list(change.paths),
                                ignore=loaded.ignored())
    except ConfigError as exc:
        if not workspace.confined and change.patch is None:
            raise  # the command line's own words ("--base: ...")
        # The caller here named the fields without dashes.
        raise ConfigError(str(exc).removeprefix("--")) from None
    check_budget(loaded, changes.diff, changes.files)
    rules = loaded.rules
    notes = [f"left out {note}" for note in changes.left_out]
    focus = focus if focus is not None else rules.focus
    default_fail_on = Severity(rules.fail_on) if threshold is None and rules.fail_on else None
    threshold = threshold or default_fail_on or Severity.MAJOR
    from_rules = not models and not config and rules.team is not None
    if from_rules:  # a discovered team, as far as consent goes (tools_withheld below)
        config = rules.team if isinstance(rules.team, str) else None
        models = list(rules.team) if isinstance(rules.team, list) else None
        notes.append(f"team: {', '.join(models or [str(config)])} "
                     f"({loaded.source('team')})")
    instructions = instructions_for(loaded, changes.files)
    guidance = await read_guidance(changes.root) if rules.guidance else Guidance()
    notes += [f"guidance: left out {note}" for note in guidance.left_out]
    spec = review_spec(changes, focus, models=models, config=config, base_url=base_url,
                       options=options, threshold=threshold, tier=tier,
                       rules=instructions + (GUIDANCE_QUESTION if guidance.text else ""),
                       guidance=guidance.text, output=output)
    review_workspace = Workspace(changes.root, confined=workspace.confined)
    try:
        team = await chosen_team(spec, review_workspace)  # once, for the checks below
    except ConfigError as exc:
        if not from_rules:
            raise
        raise ConfigError(f"{loaded.source('team')}: {exc}") from None
    refuse_embedded(team.agents)
    if workspace.confined:  # the call picked the files: never to an agent abroad
        consent.check_call(team, team, {}, None, {"paths": change.paths})
    judged = spec.model_copy(update={"models": None, "config": None}) if from_rules else spec
    withheld = tools_withheld(judged, team)
    if withheld:
        notes.append("the team reviewed the diff without reading the repository (workspace "
                     f"tools off{', no guidance files' if guidance.text else ''}): "
                     f"{'; '.join(withheld)}; name the team (models or config) to give it "
                     "the tools")
        spec = review_spec(changes, focus, models=models, config=config, base_url=base_url,
                           options=options, tools=False, threshold=threshold, tier=tier,
                           rules=instructions, output=output)
    # What one run can send: the run's context limit, or less where a member's context
    # window is known to hold less (each call must fit every member, the guidance too).
    sent = spec.question + (guidance.text if not withheld else "")
    room = min(MAX_DIFF_BYTES, diff_room(team.agents, sent) or MAX_DIFF_BYTES)
    if len(changes.diff.encode()) <= room:
        floor = review_estimate([spec], team)  # a budget below it: refused
        notes.append(f"estimate: {floor.words()}")
        run = await service.start(spec, review_workspace)
        return ReviewStarted(run, changes, notes, threshold=threshold, fail_on=default_fail_on)
    pieces = _parts_of(changes, room, narrow(given[0] if given else "worktree"), split_ok)
    guided = "" if withheld else guidance.text
    specs = [review_spec(changes, focus, models=models, config=config, base_url=base_url,
                         options=options, tools=not withheld, threshold=threshold, tier=tier,
                         rules=instructions_for(loaded, part.files)
                         + (GUIDANCE_QUESTION if guided else ""),
                         guidance=guided, output=output, part=(k, len(pieces.parts), part))
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
    return ReviewStarted(runs[0], changes, notes, threshold=threshold, fail_on=default_fail_on,
                         tier=tier,
                         parts=list(zip(pieces.parts, runs, strict=True)),
                         left_out=(*changes.left_out, *pieces.left_out))


def _parts_of(changes: Changes, room: int, how: str, split_ok: bool) -> Split:
    """``changes``' diff split by file into parts of at most ``room`` bytes, or why it
    cannot be reviewed in parts, in one line (``how``: the ways to narrow it)."""
    if not split_ok:
        raise ConfigError(f"diff: {changes.described} is {len(changes.diff.encode()):,} "
                          f"bytes, more than one review run holds ({room:,} for this team); "
                          f"{how}, or run massgen-mcp review in a terminal, which reviews it "
                          "in parts")
    pieces = split(changes.diff, room)
    if not pieces.parts:
        raise ConfigError(f"diff: every hunk of {changes.described} is more than one review "
                          f"run holds ({room:,} bytes for this team); {how}, or choose "
                          "models with larger context windows")
    return pieces


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
                         begun.threshold, begun.changes.described, begun.tier)


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
