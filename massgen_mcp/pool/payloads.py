"""Whatever Docket reads from Redis is data, never code.

Docket keeps task arguments, results, exceptions and strike values as (cloud)pickles, and a
pickle is a program: one whose ``__reduce__`` names ``os.system`` runs it when loaded. So
anyone who could write to the pool's Redis could run commands on every worker (through
``<pool>:stream``) and every front end (through ``<pool>-tasks:stream``, the MCP tasks'
Docket). This module closes that.

Why an allow-list rather than signatures: signing every payload with a pool secret would
need one more secret on every machine of the pool, and would still unpickle anything a
holder of that secret wrote. What the pool really sends is small and fixed (a session id for
a worker; an MCP tool's arguments, its result or its error for a front end), so the loader
below admits only what is needed to rebuild exactly that, and nothing a pickle could use to
call code:

* plain values (str, numbers, bytes, lists, dicts, tuples, sets, dates, UUIDs, decimals);
* pydantic models and enums defined in massgen_mcp, mcp (and mcp_types) or fastmcp(_tasks), and
  ``Exception`` subclasses from there or builtins (not ``SystemExit`` and the like: Docket
  raises the error it loads), all from modules already loaded (so a payload never imports a
  module either). A pickle can only call such a class or restore its fields: a pydantic model
  cannot be built from positional arguments at all, an enum only looks its value up, and an
  exception stores its arguments.

Every other global a pickle names (``os.system``, ``builtins.eval``, ``subprocess.Popen``,
any function) is refused before it is touched. A refused message on a stream is logged and
dropped (a worker or front end goes on taking work); a refused result or stored task makes
that one read fail with the reason.

The same goes for a message that is not a pickle problem but simply malformed (a field
missing, a ``when`` that is no date, an ``attempt`` that is no number, bytes that are no
UTF-8, arguments that are no tuple, a key of a megabyte): Docket would raise inside its
worker loop, which stops the worker (and, the message still pending, stops the next one it
is redelivered to), or inside its strike reader, which then re-reads the same message every
second and never reports the strikes loaded, so the worker never starts taking work.
Whoever can write to Redis can empty it, so this is not about keeping them out; it is about
one stray or hostile message costing one log line, not a worker.

It is installed by replacing ``cloudpickle.loads`` in the process, which is the one function
Docket calls to unpickle (``tests/pool/test_pool_security.py`` reads Docket's source to check that
it still is), and by wrapping the two places that turn a stream message into an object, so
that a refusal drops that message instead of stopping the worker's loop. Both depend on
Docket's internals, so :func:`guard_docket` refuses any pydocket outside the releases it was
read against (:data:`PYDOCKET`). ``pyproject.toml`` declares that same range in the ``pool``
and ``test`` extras, so a resolver never installs a pydocket this guard would refuse: a new
release shows up as a resolver's choice, not as a worker that will not start.
"""

from __future__ import annotations

import collections
import datetime
import decimal
import enum
import functools
import io
import logging
import pickle
import re
import sys
import uuid
from importlib import metadata
from typing import Any, ClassVar

from pydantic import BaseModel

from massgen_mcp.core.errors import ConfigError

log = logging.getLogger(__name__)

# The pydocket releases whose unpickling sites and ``from_message`` methods this guard was read
# against (0.27.0, 0.27.2 and 0.28.0 have the same ones), as pyproject.toml's extras declare it.
PYDOCKET = ">=0.27.0,<0.29"
# Where a payload's models, enums and exceptions may come from.
OWN_MODULES = ("massgen_mcp", "mcp", "mcp_types", "fastmcp", "fastmcp_tasks")
REFUSED_TASK = "massgen.refused-payload"  # what a dropped stream message becomes
MAX_NAME = 1024  # a longer key or function name is no Docket's: every log line shows it
MAX_SHOWN = 80  # how much of a hostile field a log line shows

PLAIN: frozenset[type] = frozenset({
    bool, int, float, complex, str, bytes, bytearray, list, tuple, dict, set, frozenset,
    datetime.datetime, datetime.date, datetime.time, datetime.timedelta, datetime.timezone,
    decimal.Decimal, uuid.UUID, collections.OrderedDict,
})

_installed = False


class UnsafePayloadError(pickle.UnpicklingError):
    """A payload from Redis names something other than plain data or our own records."""


def _own(module: str) -> bool:
    return module.split(".", 1)[0] in OWN_MODULES


def allowed(found: object) -> bool:
    """Whether a pickle may name ``found`` (a class; never a function)."""
    if not isinstance(found, type):
        return False
    if found in PLAIN:
        return True
    module = found.__module__
    if issubclass(found, BaseException):  # not SystemExit & co: Docket raises what it loads
        return issubclass(found, Exception) and (module == "builtins" or _own(module))
    return _own(module) and issubclass(found, (BaseModel, enum.Enum))


class _Unpickler(pickle._Unpickler):
    """Python's own unpickler (not the C one, whose opcodes cannot be overridden), with
    :meth:`find_class` narrowed and BUILD admitted only on a new model or exception: BUILD
    sets attributes, and on an enum member (which a pickle gets by value lookup) or a class
    it would change that object for the whole process (``RunStatus.COMPLETED._value_ =
    "failed"``, or ``__hash__ = None`` on a class)."""

    dispatch: ClassVar[dict[int, Any]] = dict(pickle._Unpickler.dispatch)

    def load_build(self) -> None:
        target = self.stack[-2]  # type: ignore[attr-defined]
        if isinstance(target, (type, enum.Enum)) or not isinstance(
                target, (BaseModel, BaseException)):
            raise UnsafePayloadError(
                f"it sets attributes on {type(target).__name__}, which only a new record "
                "or error may have")
        super().load_build()  # type: ignore[misc]

    dispatch[pickle.BUILD[0]] = load_build

    def find_class(self, module: str, name: str) -> Any:
        # Only modules already loaded: importing one runs its code.
        loaded = sys.modules.get(module)
        found: object = loaded
        for part in name.split("."):
            found = getattr(found, part, None) if found is not None else None
        if loaded is None or not allowed(found):
            raise UnsafePayloadError(
                f"it names {f'{module}.{name}'[:MAX_SHOWN]}, which is not plain data")
        return found

    def persistent_load(self, pid: Any) -> Any:
        raise UnsafePayloadError("it refers to a persistent object")


def loads(data: bytes | bytearray | memoryview, /, **_: Any) -> Any:
    """``pickle.loads`` that rebuilds only what :func:`allowed` admits."""
    try:
        return _Unpickler(io.BytesIO(data)).load()
    except UnsafePayloadError as exc:
        log.error("refused a payload read from the pool's Redis: %s", exc)
        raise


def _release(version: str) -> tuple[int, ...]:
    """``0.28.0`` as ``(0, 28, 0)``."""
    return tuple(int(part) for part in version.split("."))


def supported(version: str) -> bool:
    """Whether ``version`` of pydocket is a final release inside :data:`PYDOCKET`
    (``>=LOW,<HIGH``); a pre-release or a local build was read by nobody."""
    if not re.fullmatch(r"\d+(\.\d+)*", version):
        return False
    low, high = (bound.lstrip(">=<") for bound in PYDOCKET.split(","))
    return _release(low) <= _release(version) < _release(high)


def check_version() -> None:
    """Refuse a pydocket this guard was not checked against (see module)."""
    found = metadata.version("pydocket")
    if not supported(found):
        raise ConfigError(
            f"pydocket {found} is installed, but the pool's guard against code in Redis "
            f"payloads was checked against pydocket{PYDOCKET} only; install one of those "
            f"(pip install 'pydocket{PYDOCKET}')")


async def _refused(*args: Any, **kwargs: Any) -> None:
    """The task a dropped stream message runs instead: nothing (the refusal was logged),
    so Docket acknowledges the message and it is gone."""


def _text(raw: object) -> str:
    return raw.decode(errors="replace") if isinstance(raw, bytes | bytearray) else str(raw)


def _shown(raw: object) -> str:
    """A field of a hostile message as a log may show it: decoded, short, quoted."""
    text = _text(raw)
    return repr(text[:MAX_SHOWN] + ("…" if len(text) > MAX_SHOWN else ""))


def _check_execution(found: Any) -> None:
    """What Docket would otherwise trip over later, in its loop (``call_repr`` slices the
    arguments and iterates the keyword arguments; every log line carries the key)."""
    if not isinstance(found.args, tuple | list):
        raise ValueError("its arguments are not a tuple")
    if not isinstance(found.kwargs, dict) or not all(isinstance(k, str) for k in found.kwargs):
        raise ValueError("its keyword arguments are not a dict of names")
    if len(found.key) > MAX_NAME or len(found.function_name) > MAX_NAME:
        raise ValueError(f"its key or function name is longer than {MAX_NAME} characters")


def _reason(exc: Exception, refused: str) -> str:
    if isinstance(exc, UnsafePayloadError):
        return refused
    if isinstance(exc, KeyError):
        return f"it has no {_shown(exc.args[0] if exc.args else '?')} field"
    return f"it is malformed ({type(exc).__name__}: {str(exc)[:MAX_SHOWN]})"


def _read_strike_checked(read_strike: Any, cls: Any, message: Any) -> Any:
    from docket.strikelist import Operator

    direction = message[b"direction"].decode()
    if direction not in ("strike", "restore"):
        raise ValueError(f"direction {_shown(direction)} is neither strike nor restore")
    Operator(message[b"operator"].decode())  # ValueError for an operator Docket lacks
    for field in (b"function", b"parameter"):
        if len(message.get(field, b"")) > MAX_NAME:
            raise ValueError(f"its {field.decode()} is longer than {MAX_NAME} characters")
    return read_strike(cls, message)


def guard_docket() -> None:
    """Install the guard in this process, before its first Docket reads from Redis."""
    global _installed
    if _installed:
        return
    check_version()
    import cloudpickle  # type: ignore[import-untyped]
    from docket.execution import Execution
    from docket.strikelist import Operator, Restore, StrikeInstruction
    from redis.exceptions import RedisError

    cloudpickle.loads = loads
    read_execution = Execution.from_message.__func__  # type: ignore[attr-defined]
    read_strike = StrikeInstruction.from_message.__func__  # type: ignore[attr-defined]

    @functools.wraps(read_execution)
    async def execution_from_message(
            cls: type[Execution], docket: Any, message: Any, redelivered: bool = False,
            fallback_task: Any = None, message_id: Any = None, sync: bool = True
    ) -> Execution:
        try:
            found: Execution = await read_execution(cls, docket, message, redelivered,
                                                    fallback_task, message_id, sync)
            _check_execution(found)
            return found
        except RedisError:
            raise  # Redis trouble, not the message: Docket reconnects and reads it again
        except Exception as exc:  # whatever a writer to Redis can put in a message
            log.error("dropped task %s (message %s) from %s: %s",
                      _shown(message.get(b"key", b"?")), _shown(message_id or "?"),
                      docket.name, _reason(exc, "its arguments were refused"))
        # An empty task of our own under a key of our own (never one a real task may
        # have), so that Docket runs nothing and acknowledges the message.
        empty = {b"key": f"{REFUSED_TASK}:{_text(message_id)}".encode(),
                 b"when": datetime.datetime.now(datetime.UTC).isoformat().encode(),
                 b"function": REFUSED_TASK.encode(), b"args": pickle.dumps(()),
                 b"kwargs": pickle.dumps({}), b"attempt": b"1", b"generation": b"0"}
        found = await read_execution(cls, docket, empty, redelivered, _refused, message_id,
                                     sync)
        return found

    @functools.wraps(read_strike)
    def strike_from_message(cls: type[StrikeInstruction], message: Any) -> StrikeInstruction:
        try:
            found: StrikeInstruction = _read_strike_checked(read_strike, cls, message)
            return found
        except Exception as exc:  # as above; a strike message is read by every process
            log.error("dropped a strike instruction: %s", _reason(exc, "its value was refused"))
        # Docket ignores an instruction whose value cannot be hashed (logged as such).
        unhashable: Any = []
        return Restore(None, None, Operator.EQUAL, unhashable)

    Execution.from_message = classmethod(execution_from_message)  # type: ignore[assignment]
    StrikeInstruction.from_message = classmethod(  # type: ignore[assignment]
        strike_from_message)
    _installed = True
