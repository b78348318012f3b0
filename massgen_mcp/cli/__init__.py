"""The ``massgen-mcp`` command: runs and records (:mod:`.main`), installing into hosts
(:mod:`.install`) and the eval harness (:mod:`.evaluate`)."""
