"""The team as one model: the Python API (:mod:`.python`), the team model names and chat
message rules shared by the faces (:mod:`.team_names`), and the LiteLLM provider
(:mod:`.litellm_team`).

    from massgen_mcp.api import review, run

``review`` is not on the top-level package: ``massgen_mcp.review`` is the package that
collects a change.
"""

from massgen_mcp.api.python import areview, arun, review, run

__all__ = ["areview", "arun", "review", "run"]
