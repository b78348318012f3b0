"""The HTTP server's "stopping" flag, set as soon as a signal asks it to stop.

Calls still in flight read it so that they answer (or step aside) at once instead of holding
the shutdown: an OpenAI request answers with a resumable error, an MCP task gives its slot
back for another front end to take. A thread-safe flag, because uvicorn sets it from its
signal handler.
"""

from __future__ import annotations

import threading

stopping = threading.Event()
