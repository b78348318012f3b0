"""The run that reviews :class:`~massgen_mcp.review.changes.Changes`: an ordinary consensus
run (recorded, resumable, steerable like any), whose question asks for a review and whose
context is the diff.

The diff goes into the run's ``context``, not its question: a question is capped at
:data:`~massgen_mcp.core.spec.MAX_QUESTION_CHARS` and a diff may be four times that, and the
context is what every agent's prompt carries once per turn. API members get the read-only
workspace tools (``workspace_tools``), rooted at the repository by the face that starts the
run (``ConsensusService.start(spec, Workspace(changes.root, ...))``), so they can open the
files around a change; the tools refuse the secret-file deny-list as everywhere.

The run's :class:`~massgen_mcp.core.outcomes.ReviewTarget` makes its answers reviews: each
member answers with findings in the format of :data:`massgen_mcp.consensus.findings.FORMAT`
(a corrective retry says what is wrong with one that is not), and the result carries the
findings the team agrees on, the verdict and the dissent (:mod:`massgen_mcp.consensus.findings`).
"""

from __future__ import annotations

import functools
import operator
from collections.abc import Sequence

from massgen_mcp.consensus.findings import FORMAT
from massgen_mcp.core.edges import check_text
from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.options import RunOptions
from massgen_mcp.core.outcomes import ReviewOutput, ReviewTarget, Severity, Tier
from massgen_mcp.core.spec import RunSpec, TeamConfig
from massgen_mcp.review.changes import CONTEXT_LINES, Changes
from massgen_mcp.review.estimate import Estimate, estimate
from massgen_mcp.review.parts import Part
from massgen_mcp.review.parts import changed_lines_in as changes_lines
from massgen_mcp.team import consent
from massgen_mcp.team.choose import choose_team
from massgen_mcp.team.context_files import Workspace

MAX_FOCUS_CHARS = 2_000
MAX_LISTED_FILES = 200
# Each list (files, left out) stays under this many characters, so that both fit the
# question's limit whatever the paths (a patch's paths can be long).
MAX_LISTING_CHARS = 16_000
MAX_ENTRY_CHARS = 300

REVIEW_OPENING = "Review a code change as a careful senior reviewer:"  # every review's question
INSTRUCTIONS = """\
Review a code change as a careful senior reviewer: {described}, {count} file(s) of the \
repository.

Look for, in this order:
- correctness: wrong results, off-by-one errors, wrong conditions, unhandled errors and edge \
cases, races, resource leaks;
- security: injection (SQL, shell, paths), unsafe handling of untrusted input, secrets in \
code, missing checks;
- breaking changes to callers, and missing or wrong tests;
- then clarity, only where it hides a bug.
{focus}
Severity: blocker (must not merge: a security hole, data loss, a crash on the main path), \
major (a real bug or risk to fix before merging), minor (worth fixing, not worth holding the \
change), nit (taste). Report only what the change shows or what you checked; an empty list \
of findings is the right review of a good change. The diff is in the context (unified, \
{context} lines of context; lines starting with + are new; line numbers are the new side's, \
from the @@ headers); read the repository's other files with your tools where you need them \
(read-only).

{format}

Files changed:
{files}{left_out}"""


def _listing(entries: tuple[str, ...], more: str) -> str:
    """``entries`` as ``- entry`` lines, each cut at :data:`MAX_ENTRY_CHARS`, at most
    :data:`MAX_LISTED_FILES` of them and :data:`MAX_LISTING_CHARS` in all, then how many
    more there are."""
    lines: list[str] = []
    size = 0
    for entry in entries[:MAX_LISTED_FILES]:
        line = "- " + (entry if len(entry) <= MAX_ENTRY_CHARS
                       else entry[:MAX_ENTRY_CHARS - 3] + "...")
        if size + len(line) + 1 > MAX_LISTING_CHARS:
            break
        lines.append(line)
        size += len(line) + 1
    if len(lines) < len(entries):
        lines.append(f"- ... and {len(entries) - len(lines)} more {more}".rstrip())
    return "\n".join(lines)


def review_question(changes: Changes, focus: str | None = None,
                    part: tuple[int, int, Part] | None = None) -> str:
    """The review prompt for ``changes``, with the person's ``focus`` (e.g. "security");
    ``part``: (k, n, the part) of a diff reviewed in parts, whose files it lists."""
    focus_line = ""
    if focus is not None:
        focus = check_text(focus, "focus").strip()
        if not focus:
            raise ConfigError("--focus: empty; say what to look at (e.g. security)")
        if len(focus) > MAX_FOCUS_CHARS:
            raise ConfigError(f"--focus: {len(focus)} characters; the limit is "
                              f"{MAX_FOCUS_CHARS} (say what to look at, in a sentence)")
        focus_line = f"\nThe author asks you to focus on: {focus}\n"
    files = _listing(part[2].files if part else changes.files, "(see the diff)")
    left_out = ""
    if part is not None:
        k, n, _ = part
        files = (f"(part {k} of {n}: the change is too large for one review, so each part is "
                 "reviewed on its own; review only these files, the diff in the context)\n"
                 + files)
    elif changes.left_out:  # capped as the files are: 1,900 images must not fill the question
        left_out = ("\n\nLeft out of the diff (not sent to you):\n"
                    + _listing(changes.left_out, ""))
    return INSTRUCTIONS.format(described=changes.described,
                               count=len(part[2].files if part else changes.files),
                               focus=focus_line, context=CONTEXT_LINES, format=FORMAT,
                               files=files, left_out=left_out)


def review_spec(changes: Changes, focus: str | None = None, *,
                models: list[str] | None = None, config: str | None = None,
                base_url: str | None = None, options: RunOptions | None = None,
                tools: bool = True, threshold: Severity = Severity.MAJOR,
                tier: Tier = Tier.AGREED, rules: str = "", guidance: str = "",
                output: ReviewOutput | None = None,
                part: tuple[int, int, Part] | None = None) -> RunSpec:
    """The :class:`RunSpec` of a review: the team and limits as ``run`` takes them
    (``options``: only the fields set count), with the workspace tools on unless ``tools``
    is False (:func:`tools_withheld`); ``threshold``: the least severity of a counted
    finding that requests changes; ``tier``: the least tier counted. ``rules``: the
    repository's instructions for the files sent, added to the question; ``guidance``: its
    guidance files, put before the diff in the context (both from
    :mod:`massgen_mcp.review.rules`); ``output``: how the command line shows the outcome
    (recorded, for ``resume``); ``part``: (k, n, the part) of a diff reviewed in parts
    (its run sends that part, with a share of the budget: :func:`part_options`)."""
    given = options.model_dump(exclude_unset=True) if options is not None else {}
    if part is None:
        diff, files, lines = changes.diff, changes.files, changes_lines(changes.diff)
        left_out = list(changes.left_out)
    else:
        diff, files, lines, left_out = part[2].diff, part[2].files, part[2].lines, []
        given = part_options(given, part[1])
    target = ReviewTarget(root=str(changes.root), commit=changes.commit,
                          described=changes.described, files=list(files),
                          threshold=threshold, lines=lines, left_out=left_out,
                          part=part[0] if part else 0, parts=part[1] if part else 0,
                          tier=tier, output=output or ReviewOutput())
    return RunSpec(question=review_question(changes, focus, part) + rules, models=models,
                   config=config, base_url=base_url, context=guidance + diff,
                   options=RunOptions(**{**given, "workspace_tools": tools}), review=target)


def part_options(given: dict[str, object], parts: int) -> dict[str, object]:
    """A part's limits: the review's budgets (cost, tokens) shared evenly among its
    ``parts``, which run at once; its time limits as they are (a part runs in the same
    time as the whole would)."""
    shared = dict(given)
    if isinstance(cost := given.get("max_cost_usd"), (int, float)):
        shared["max_cost_usd"] = cost / parts
    if isinstance(tokens := given.get("max_total_tokens"), int):
        shared["max_total_tokens"] = max(tokens // parts, 1)
    return shared


async def chosen_team(spec: RunSpec, workspace: Workspace) -> TeamConfig:
    """The team ``spec`` will get, as its own config or the discovered one chooses it, without
    the review's own ``workspace_tools``: what :func:`tools_withheld` and
    :func:`review_estimate` both judge, chosen once (a discovery may probe local servers)."""
    others = {k: v for k, v in spec.overrides().items() if k != "workspace_tools"}
    return (await choose_team(spec.model_copy(update={"options": RunOptions(**others)}),
                              workspace)).team


def tools_withheld(spec: RunSpec, found: TeamConfig) -> list[str]:
    """Why a review's team (``found``: :func:`chosen_team`) must not get the workspace
    tools: one line per agent of a *discovered* team (no ``models``, no ``config``: a
    project's ``.massgen/config.yaml`` may be the one found) that sits at a foreign endpoint
    and would read the repository through them. That file would need the user's consent to
    turn the tools on itself (:mod:`massgen_mcp.team.consent`); review turning them on must
    not go round it. A team the user names (``--models``, ``--config``) is the user's
    choice, as ``run --context-file`` is. Empty: the tools may be given."""
    if spec.models or spec.config or not spec.overrides().get("workspace_tools"):
        return []
    if found.options.workspace_tools:  # the file turns them on itself, under its consent
        return []
    given = found.model_copy(update={
        "options": found.options.model_copy(update={"workspace_tools": True})})
    return consent.exposures(given)


def review_estimate(specs: Sequence[RunSpec], team: TeamConfig) -> Estimate:
    """The floor of the cost (:mod:`.estimate`) of ``specs``, a review's run or its parts'
    runs, for its ``team`` (:func:`chosen_team`: the call's limits are already on its
    options); refused before anything runs when the run's ``max_cost_usd`` is below it."""
    models = [agent.model for agent in team.agents]
    found = functools.reduce(operator.add, (estimate(models, spec.question, spec.context or "")
                                            for spec in specs))
    budget = team.options.max_cost_usd
    if budget is not None and found.cost_usd is not None and found.cost_usd > budget:
        raise ConfigError(f"max_cost_usd: ${budget:g} is below this review's floor, "
                          f"{found.words()}; raise it, or narrow the review (fewer files, "
                          "one commit, --base)")
    return found
