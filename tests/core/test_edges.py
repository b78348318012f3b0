"""One measure of nesting for every parser: JSON's check and TOML's (which caps nothing
itself) agree on what is too deep, and neither recurses to find out."""

from __future__ import annotations

import json

import pytest

from massgen_mcp.core.edges import MAX_JSON_DEPTH, UnsafeJson, load_json, nests_deeper


def nested(levels: int, kind: type = list) -> object:
    """``levels`` containers, one inside the next, built without recursion."""
    value: object = [] if kind is list else {}
    for _ in range(levels - 1):
        value = [value] if kind is list else {"k": value}
    return value


@pytest.mark.parametrize("kind", [list, dict])
def test_json_and_a_decoded_toml_document_share_one_limit(kind: type) -> None:
    at_limit, over = nested(MAX_JSON_DEPTH, kind), nested(MAX_JSON_DEPTH + 1, kind)
    assert not nests_deeper(at_limit)
    assert load_json(json.dumps(at_limit)) == at_limit
    assert nests_deeper(over)
    with pytest.raises(UnsafeJson, match=f"nested deeper than {MAX_JSON_DEPTH} levels"):
        load_json(json.dumps(over))


def test_scalars_nest_nothing_and_a_smaller_limit_is_kept() -> None:
    assert not nests_deeper("x" * 1000)
    assert not nests_deeper({"a": [1, "b", None]}, limit=2)
    assert nests_deeper({"a": [1, {"b": 2}]}, limit=2)


def test_the_measure_does_not_recurse() -> None:
    assert nests_deeper(nested(100_000))  # far past Python's recursion limit
