"""Safe YAML for files anyone may have written: bounded before it is read, bounded after.

A config file is refused over :data:`MAX_CONFIG_BYTES` before a byte is parsed, must be UTF-8,
and is parsed with the safe loader; a document whose aliases (``&a`` ... ``*a``) expand past
:data:`MAX_YAML_NODES` values is refused before it is built (a few hundred bytes of nested
aliases can otherwise expand into billions of values). What the values *mean* (MassGen's
format) is :mod:`massgen_mcp.team.massgen_yaml`'s; this module knows only YAML.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely

MAX_CONFIG_BYTES = 1_000_000
MAX_YAML_NODES = 10_000


def read_config_text(path: Path) -> str:
    """The file's text, refusing anything over :data:`MAX_CONFIG_BYTES` before reading it.

    Read through :func:`~massgen_mcp.core.files.read_bytes_safely`: the open never waits (a
    config swapped for a FIFO after whoever chose it looked at it hung the run, and the
    server's exit with it) and the open file, not the name, must be a regular file. A link
    is followed: people keep their configs in dotfiles repositories, and consent is given
    to a project config by the path it was reached by (:mod:`massgen_mcp.team.consent`)."""
    try:
        data = read_bytes_safely(path, MAX_CONFIG_BYTES, follow_link=True)
    except FileNotFoundError:
        raise ConfigError(f"config file {str(path)!r} does not exist") from None
    except UnsafeFileError as exc:
        if exc.reason != "too_big":
            raise ConfigError(f"config file {str(path)!r} is not a regular file; give the "
                              "path of a YAML file") from None
        size = f"{exc.size} bytes" if exc.size is not None else f"over {MAX_CONFIG_BYTES} bytes"
        raise ConfigError(f"config file {str(path)!r} is {size}; the limit is "
                          f"{MAX_CONFIG_BYTES} (a team config is a few hundred bytes)") from None
    except OSError as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"config file {str(path)!r} is not UTF-8 text") from None


def parse_yaml(text: str, source: str) -> Any:
    """Safe YAML, refusing documents whose aliases (``&a`` ... ``*a``) expand past
    :data:`MAX_YAML_NODES` values: a few hundred bytes of nested aliases can otherwise expand
    into billions of values for whoever walks the result."""
    try:  # the reader refuses control characters as soon as it is made
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as exc:
        raise _not_yaml(source, text, exc) from None
    try:
        node = loader.get_single_node()
        if node is None:
            return None
        _check_expanded_size(node, source)
        return loader.construct_document(node)
    except yaml.YAMLError as exc:
        raise _not_yaml(source, text, exc) from None
    except RecursionError:
        raise ConfigError(f"config file {source!r} nests too deeply") from None
    finally:
        loader.dispose()


def _not_yaml(source: str, text: str, exc: yaml.YAMLError) -> ConfigError:
    """One line naming the file, the line and column, and what is wrong there (PyYAML's
    own text names ``<unicode string>`` and spans five lines)."""
    if isinstance(exc, yaml.reader.ReaderError):  # a character YAML does not allow
        line = text.count("\n", 0, exc.position) + 1
        column = exc.position - (text.rfind("\n", 0, exc.position) + 1) + 1
        return ConfigError(f"{source}, line {line}, column {column}: not valid YAML: "
                           f"unacceptable character #x{exc.character:04x} ({exc.reason}); "
                           "remove it")
    if isinstance(exc, yaml.MarkedYAMLError) and exc.problem_mark is not None:
        mark = exc.problem_mark
        context = ""
        if exc.context and exc.context_mark is not None:
            context = (f" ({exc.context} that starts at line {exc.context_mark.line + 1}, "
                       f"column {exc.context_mark.column + 1})")
        return ConfigError(f"{source}, line {mark.line + 1}, column {mark.column + 1}: not "
                           f"valid YAML: {exc.problem}{context}")
    return ConfigError(f"{source}: not valid YAML: {exc}")


def _check_expanded_size(root: yaml.Node, source: str) -> None:
    sizes: dict[int, int] = {}  # id(node) -> values under it with aliases expanded

    def size(node: yaml.Node, depth: int) -> int:
        if id(node) in sizes:
            return sizes[id(node)]
        if depth > 100:
            raise ConfigError(f"config file {source!r} nests deeper than 100 levels")
        total = 1
        if isinstance(node, yaml.SequenceNode):
            total += sum(size(child, depth + 1) for child in node.value)
        elif isinstance(node, yaml.MappingNode):
            total += sum(size(k, depth + 1) + size(v, depth + 1) for k, v in node.value)
        sizes[id(node)] = total
        if total > MAX_YAML_NODES:
            raise ConfigError(f"config file {source!r} expands to more than {MAX_YAML_NODES} "
                              "values through YAML aliases (&name / *name); write it out plainly")
        return total

    size(root, 0)
