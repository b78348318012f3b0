"""A local ``hf:`` folder (written as a path), read without ``datasets`` resolving anything:
its data files for a split are found here and read by eval's own readers.

``datasets.load_dataset`` would first convert the whole folder into its Arrow cache (a 25 KB
file became 205 MB there before row 1), and even ``load_dataset_builder`` resolves a README's
``data_files`` patterns (a URL fetched, ``/**`` walking the filesystem) before they can be
checked. So the split's files are found here: the README's ``configs`` (read bounded, as safe
YAML; a pattern that could reach outside the folder is refused by its shape), or
``datasets``' own split names, matched against one walk of the folder; each file is then
opened by :func:`massgen_mcp.evaluation.dataset_files.open_file`, as a file named on the
command line is.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from massgen_mcp.core.errors import ConfigError
from massgen_mcp.evaluation.dataset_files import open_file
from massgen_mcp.evaluation.source_rows import EXTENSIONS, Lazy, Source

MAX_README_BYTES = 2**20  # a local hf: folder's README (its YAML header names the data files)
MAX_FOLDER_ENTRIES = 100_000  # files and folders walked in a local hf: folder


def open_hf_folder(source: str, name: str, config: str, split: str, label: str,
                   sampling: bool, fields: Sequence[str]) -> Source:
    """A local folder's data files for ``split`` (file and folder names such as
    ``data/test-00000-of-00001.parquet``, as ``datasets`` names splits, or its README's
    ``configs``), read by eval's own readers, one file after another: nothing is
    converted or written.

    The folder may be a clone: its README's ``data_files`` patterns are the attacker's.
    ``datasets.load_dataset_builder`` resolves them before anything can look at the files
    they reach: a URL is listed over HTTP (a beacon, a GET into the local network), and
    ``/**/*.csv`` walks the whole filesystem (27.8 s, 671 MB). So the README is read here,
    a pattern that could reach outside the folder (absolute, ``..``, ``~``, a scheme or a
    drive) is refused by its shape, and the rest are matched against one walk of the
    folder itself (links not followed, at most :data:`MAX_FOLDER_ENTRIES` entries)."""
    import datasets.data_files

    root = Path(name).resolve()
    if not root.is_dir():
        raise ConfigError(f"{source}: {name} is not a folder; write hf:./FOLDER for a local "
                          "one, or hf:OWNER/NAME for the Hub's")
    splits, data_dir = _readme_splits(source, root, config)
    base = root / data_dir  # data_dir's shape was checked: inside the folder, or a link
    if not base.resolve().is_relative_to(root) or not base.is_dir():
        raise ConfigError(f"{source}: the README's data_dir {data_dir} is not a folder inside "
                          "the folder")
    listing = _folder_files(source, base)
    if splits is None:
        splits = _default_splits(listing, datasets.data_files)
        listing = [f for f in listing if Path(f).suffix.lower() in EXTENSIONS]
    if split not in splits:
        found = ", ".join(splits) or "none"
        raise ConfigError(f"{source}: the folder has no data files for split {split!r} "
                          f"(splits: {found}); name one as hf:{name}:{config}:SPLIT")
    ignored = set(datasets.data_files.FILES_TO_IGNORE)
    paths: list[str] = []
    for pattern in splits[split]:
        matched = sorted(f for f in listing if _glob(pattern).fullmatch(f)
                         and f.rsplit("/", 1)[-1] not in ignored)
        paths += [str(base / f) for f in matched if str(base / f) not in paths]
    if not paths:
        raise ConfigError(f"{source}: the folder's patterns for split {split!r} match no "
                          "files")
    for path in paths:
        if Path(path).suffix.lower() not in EXTENSIONS:
            raise ConfigError(f"{source}: {path}: eval reads a folder's {', '.join(EXTENSIONS)} "
                              "files; convert it to one of them")
        # A file may be a link: what a cloned folder makes eval send to the models stays
        # inside it.
        if not Path(path).resolve().is_relative_to(root):
            raise ConfigError(f"{source}: {path} is outside the folder (a link); eval reads "
                              "only the folder's own files")

    def rows() -> Iterator[Lazy]:
        index = 0
        for path in paths:
            for _, parse in open_file(path, Path(path), sampling, fields).rows:
                yield f"{label}#{index}", parse
                index += 1

    return Source(label, rows())


def _readme_splits(source: str, root: Path, config: str
                   ) -> tuple[dict[str, list[str]] | None, str]:
    """The split -> patterns of the folder's README's ``configs`` for ``config`` (empty:
    the default one), and its ``data_dir`` (the patterns are relative to it), each checked
    to stay inside the folder; None for the splits when the config names no data_files
    (they are found by file names, as without a README), "." for no data_dir."""
    readme = root / "README.md"
    header = _readme_header(source, readme)
    configs = header.get("configs") if isinstance(header, dict) else None
    if configs is None:
        return _no_configs(source, config)
    shape = (f"{source}: {readme}: configs must be a list of mappings with config_name and "
             "data_files")
    if not isinstance(configs, list) or not all(isinstance(c, dict) for c in configs):
        raise ConfigError(shape)
    names = [str(c.get("config_name", "default")) for c in configs]
    if config:
        chosen = [c for c, n in zip(configs, names, strict=True) if n == config]
    else:
        chosen = ([c for c in configs if c.get("default") is True]
                  or [c for c, n in zip(configs, names, strict=True) if n == "default"]
                  or (configs if len(configs) == 1 else []))
    if not chosen:
        raise ConfigError(f"{source}: the folder's README has no config {config or 'default'!r}"
                          f" (configs: {', '.join(names) or 'none'}); name one as "
                          "hf:FOLDER:CONFIG:SPLIT")
    data_dir = chosen[0].get("data_dir", ".")
    if not isinstance(data_dir, str):
        raise ConfigError(shape)
    _check_pattern(source, readme, data_dir)
    files = chosen[0].get("data_files")
    if files is None and "data_dir" in chosen[0]:
        return None, data_dir
    if isinstance(files, str | list) and not (isinstance(files, list) and files
                                              and isinstance(files[0], dict)):
        files = {"train": files}
    elif isinstance(files, list):
        files = {str(entry.get("split", "train")): entry.get("path") for entry in files
                 if isinstance(entry, dict)}
    if not isinstance(files, dict):
        raise ConfigError(shape)
    splits: dict[str, list[str]] = {}
    for name, patterns in files.items():
        patterns = [patterns] if isinstance(patterns, str) else patterns
        if not isinstance(patterns, list) or not all(isinstance(p, str) for p in patterns):
            raise ConfigError(f"{source}: {readme}: data_files of split {name!r} must be a "
                              "path pattern or a list of them")
        for pattern in patterns:
            _check_pattern(source, readme, pattern)
        splits[str(name)] = patterns
    return splits, data_dir


def _readme_header(source: str, readme: Path) -> object:
    """The README's YAML header (between its first two ``---`` lines), None without one;
    read bounded (:data:`MAX_README_BYTES`, no link, no FIFO) and parsed as safe YAML."""
    from massgen_mcp.core.files import UnsafeFileError, read_bytes_safely
    from massgen_mcp.team.safe_yaml import parse_yaml

    try:
        text = read_bytes_safely(readme, MAX_README_BYTES).decode("utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.reason if isinstance(exc, UnsafeFileError) else type(exc).__name__
        raise ConfigError(f"{source}: the folder's README.md cannot be read ({why}); it must "
                          f"be a UTF-8 file of at most {MAX_README_BYTES // 2**20} MiB, not a "
                          "link") from None
    lines = [line.strip() for line in text.lstrip("\ufeff").splitlines()]
    if not lines or lines[0] != "---" or "---" not in lines[1:]:
        return None
    return parse_yaml("\n".join(text.lstrip("\ufeff").splitlines()[1:lines.index("---", 1)]),
                      str(readme))


def _no_configs(source: str, config: str) -> tuple[None, str]:
    if config:
        raise ConfigError(f"{source}: the folder's README names no configs, so there is no "
                          f"config {config!r}; leave it out, as hf:FOLDER::SPLIT")
    return None, "."


def _check_pattern(source: str, readme: Path, pattern: str) -> None:
    """Refuse, by its shape alone (nothing is listed yet), a pattern that could reach
    anything but the folder's own files."""
    parts = pattern.replace("\\", "/").split("/")
    if (not pattern or "://" in pattern or pattern.startswith(("/", "\\", "~"))
            or ".." in parts or (len(pattern) > 1 and pattern[1] == ":")):
        raise ConfigError(f"{source}: {readme}: data_files {pattern} is outside the folder "
                          "or could reach outside it (a URL, an absolute path, ~ or ..); eval "
                          "reads only the folder's own files, named relative to it")


def _folder_files(source: str, root: Path) -> list[str]:
    """The folder's files as relative POSIX paths, walked once without following links
    into other folders; hidden ones (``.git``) and ``__special__`` ones left out, as
    ``datasets`` leaves them out."""
    import os

    found: list[str] = []
    seen = 0
    for folder, dirs, files in os.walk(root, followlinks=False):
        dirs[:] = sorted(d for d in dirs if not d.startswith((".", "__")))
        seen += len(dirs) + len(files)
        if seen > MAX_FOLDER_ENTRIES:
            raise ConfigError(f"{source}: the folder holds more than {MAX_FOLDER_ENTRIES:,} "
                              "files and folders; point eval at the data file itself")
        relative = Path(folder).relative_to(root).as_posix()
        prefix = "" if relative == "." else relative + "/"
        found += [prefix + f for f in files if not f.startswith((".", "__"))]
    return found


def _default_splits(listing: list[str], known: Any) -> dict[str, list[str]]:
    """The splits ``datasets`` infers from file and folder names (its own patterns, in its
    order: ``data/test-00000-of-00001.parquet``, then ``test.csv`` or ``test/``, then every
    file as ``train``), over the folder's eval-readable files."""
    import re

    files = [f for f in listing if Path(f).suffix.lower() in EXTENSIONS]
    for sharded in known.ALL_SPLIT_PATTERNS:
        template = re.compile(_glob(sharded.replace("{split}", "SPLITNAME")).pattern
                              .replace("SPLITNAME", "(?P<split>[^/]+?)"))
        splits: dict[str, list[str]] = {}
        for f in files:
            if match := template.fullmatch(f):
                splits.setdefault(match["split"], [sharded.format(split=match["split"])])
        if splits:
            return splits
    for patterns in known.ALL_DEFAULT_PATTERNS:
        found = {str(split): list(globs) for split, globs in patterns.items()
                 if any(_glob(g).fullmatch(f) for g in globs for f in files)}
        if found:
            return found
    return {}


def _glob(pattern: str) -> Any:
    """``pattern`` as ``datasets`` (fsspec) matches it against a relative POSIX path:
    ``*`` and ``?`` within a name, ``**`` across folders (``**/`` also none), ``[...]``."""
    import re

    out, i = [], 0
    while i < len(pattern):
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
        elif pattern.startswith("**", i):
            out.append(".*")
            i += 2
        elif pattern[i] == "*":
            out.append("[^/]*")
            i += 1
        elif pattern[i] == "?":
            out.append("[^/]")
            i += 1
        elif pattern[i] == "[" and (close := pattern.find("]", i + 2)) > 0:
            inner = pattern[i + 1:close]
            out.append("[" + ("^" + inner[1:] if inner.startswith("!") else inner)
                       .replace("\\", "\\\\") + "]")
            i = close + 1
        else:
            out.append(re.escape(pattern[i]))
            i += 1
    return re.compile("".join(out))
