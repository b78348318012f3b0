"""litellm's model map, read without litellm: the names it routes without a prefix (and to
which provider), and each model's prices.

A bare model name (``gpt-4o``: OpenAI, ``claude-haiku-4-5``: Anthropic) is routed by this map
(:func:`bare_models`); which provider then serves it, with this server's own policy, is
:func:`massgen_mcp.providers.kinds.provider_of`'s. A call's price is :func:`cost_of`.

litellm costs ~3 s to import, so nothing here imports it: its map is a JSON file read from
its package the first time a bare name is looked up (~25 ms).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import re
import threading
from pathlib import Path
from typing import Any

# The map's provider labels that are not a routing prefix, as litellm routes them.
_ROUTES = {"bedrock_converse": "bedrock", "ai21": "ai21_chat"}
_LABEL = re.compile(r"[a-z0-9_\-]+")  # not the odd entry that gives a sentence instead


_reading = threading.Lock()  # one read of the map, however many threads ask at once
_soon: list[threading.Thread] = []  # the read read_model_map_soon started, if it did


def model_map() -> dict[str, Any] | None:
    """litellm's bundled model map (names, providers, prices), read once without importing
    litellm; None when litellm or its map cannot be found or read.

    Read once even when several threads ask first at the same time (a team's first replies
    each price their call on a thread of its own): unlocked, each parsed the ~3 MB file
    again, holding the interpreter lock ~30 ms apiece just as the next turns were due."""
    with _reading:
        return _read_model_map()


def model_map_read() -> bool:
    """Whether :func:`model_map` has been read (asking it now costs no file read)."""
    return _read_model_map.cache_info().currsize > 0


def read_model_map_soon() -> None:
    """Start reading the map on a thread of its own unless it is read or being read: for a
    caller that will price a call once its reply comes, so that the read overlaps the wait
    for the model instead of coming after it."""
    if not model_map_read() and not _soon:
        _soon.append(threading.Thread(target=model_map, name="model-map", daemon=True))
        _soon[0].start()


@functools.cache
def _read_model_map() -> dict[str, Any] | None:
    path = _model_map_path()
    if path is None:
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


@functools.cache
def bare_models() -> dict[str, str] | None:
    """The names litellm routes without a prefix, each with the provider it routes them to
    (``vertex_ai-language-models`` is ``vertex_ai``), or None when litellm or its map cannot
    be found."""
    data = model_map()
    if data is None:
        return None
    routes = {}
    for name, entry in data.items():
        label = entry.get("litellm_provider") if isinstance(entry, dict) else None
        if "/" not in name and isinstance(label, str) and _LABEL.fullmatch(label):
            # "vertex_ai-language-models", "fireworks_ai-embedding-models"
            route = label.split("-")[0] if label.endswith("-models") else label
            routes[name] = _ROUTES.get(route, route)
    return routes


def _model_map_path() -> Path | None:
    """litellm's bundled model map, found without importing litellm (the same file it reads
    itself: load_litellm sets LITELLM_LOCAL_MODEL_COST_MAP)."""
    try:
        spec = importlib.util.find_spec("litellm")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations)),
                "model_prices_and_context_window_backup.json")
    return path if path.is_file() else None


_TIER = re.compile(r"input_cost_per_token_above_(\d+)(k?)_tokens")


def cost_of(model: str, prompt_tokens: int, completion_tokens: int) -> float | None:
    """The call's price in US dollars from litellm's price table, as litellm's
    ``cost_per_token`` reckons a call with no cached tokens: the model's per-token prices, or
    the prices of the highest ``above_<N>k_tokens`` tier the prompt passes. None when the table
    does not know the model (most models a server of one's own serves). The table is read
    from litellm's own copy without importing litellm (blocking, once: ~3 MB of JSON)."""
    table = model_map() or {}
    entry = table.get(model) or table.get(model.split("/", 1)[-1])
    if not isinstance(entry, dict):
        return None
    input_key, output_key = "input_cost_per_token", "output_cost_per_token"
    passed = 0
    for key in entry:
        tier = _TIER.fullmatch(key)
        if tier is None:
            continue
        threshold = int(tier[1]) * (1000 if tier[2] else 1)
        if passed < threshold < prompt_tokens:
            passed = threshold
            input_key, output_key = key, key.replace("input_", "output_", 1)
    try:
        price = (prompt_tokens * float(entry.get(input_key) or 0)
                 + completion_tokens * float(entry.get(output_key) or 0))
    except (TypeError, ValueError):
        return None
    return price
