"""The executor layer: the seam every executor implements (:mod:`.seam`), the in-process
executor (:mod:`.local`), the file note channel that steers a run another process holds
(:mod:`.inbox`) and the pure rules of waiting for a run (:mod:`.waiting`). The pool's
executor (:mod:`massgen_mcp.pool`) implements the same seam on Redis."""
