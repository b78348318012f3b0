"""The ``massgen-mcp`` command: the parser and dispatch (:mod:`.main`), one module per group of
commands (:mod:`.run`, :mod:`.records`, :mod:`.config`, :mod:`.serve`), what the flags name
(:mod:`.flags`), every line it writes and its exit codes (:mod:`.output`), installing into hosts
(:mod:`.install`) and the eval harness (:mod:`.evaluate`)."""
