"""The team as one model: the Python API (:mod:`.python`), the team model names and chat
message rules shared by the faces (:mod:`.team_names`), and the LiteLLM provider
(:mod:`.litellm_team`).

    from massgen_mcp.api import run
"""

from massgen_mcp.api.python import arun, run

__all__ = ["arun", "run"]
