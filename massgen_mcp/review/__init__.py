"""Reviewing real work as a team (issue 55): what to review (:mod:`.changes`), a read-only
snapshot of the repository for coding-CLI members (:mod:`.snapshot`), and the run that
reviews it (:mod:`.run`). Used by the faces (``massgen-mcp review``); uses core/, team/ and
tools/ helpers (the secret-file deny-list) and starts its run through the service."""
