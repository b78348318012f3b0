"""Runs on a worker pool: Docket (Redis streams) queues them, any worker runs them.

The embedded default runs every session in the server's own process
(:class:`~massgen_mcp.executors.local.LocalExecutor`). With ``--redis URL`` the processes split:

* front ends (``massgen-mcp serve --http --redis URL``) hold no run state. They write a new
  session's record (config, request, a ``queued`` status) to the shared ``MASSGEN_HOME`` and
  put the session id on Docket's queue (:class:`~.executor.PoolExecutor`);
* workers (``massgen-mcp worker --redis URL``) take session ids off the queue and run them
  with the same engine, writing the same record (:mod:`.worker`).

Redis carries only what is live (:mod:`.live`): each run's latest status and events for
every front end to read and wake on, cancel requests, and which worker holds which run; the
agents' live drafts as messages only, never stored (:mod:`.drafts`); steering notes and their
replies (:mod:`.steering`). Task
payloads are session ids; keys stay in each process's environment. A run always continues
from its record, so a worker that dies costs only the calls in flight at that moment.
"""
