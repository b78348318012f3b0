"""Session records on disk and the runner that owns in-process runs."""
