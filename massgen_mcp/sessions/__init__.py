"""Session records on disk and the local executor, which owns the runs in this process."""
