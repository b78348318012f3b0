"""Fill in what a release takes from the repository it is published from.

The MCP Registry names a server after the GitHub repository that publishes it
(``io.github.OWNER/NAME``), and checks that name against the ``mcp-name:`` marker in the README
that PyPI shows. The checkout does not know that repository until it has one, so server.json and
README.md carry the placeholder ``OWNER/REPO`` and the release workflow runs this script with
``--repository $GITHUB_REPOSITORY`` before it builds the package. The version is read from
massgen_mcp/_version.py, the one place it lives. With ``--mcpb`` the bundle the release attaches
is added to server.json (its download address and SHA-256); with ``--tag`` the tag must name
that version and CHANGELOG.md must date it.

Standard library only: it runs before anything is installed. Bad input is one line on stderr
and exit status 2; nothing is written then.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import re
import sys
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PLACEHOLDER = "OWNER/REPO"
REPOSITORY = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}")
MARKER = re.compile(r"<!-- mcp-name: [^ ]+ -->")


class ReleaseError(Exception):
    """What is wrong, in one line."""


def version(root: Path = ROOT) -> str:
    found = re.search(r'^__version__ = "([^"]+)"$',
                      (root / "massgen_mcp" / "_version.py").read_text(encoding="utf-8"),
                      flags=re.MULTILINE)
    if not found:
        raise ReleaseError("massgen_mcp/_version.py has no __version__ = \"X.Y.Z\" line")
    return found.group(1)


def repository(given: str | None, root: Path = ROOT) -> str:
    """OWNER/NAME: as given, else $GITHUB_REPOSITORY, else pyproject's [project.urls]."""
    urls = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8")).get(
        "project", {}).get("urls", {})
    from_urls = next((url.removeprefix("https://github.com/").removesuffix(".git")
                      for key, url in urls.items() if key.lower() in ("repository", "source")
                      and url.startswith("https://github.com/")), None)
    chosen = given or os.environ.get("GITHUB_REPOSITORY") or from_urls
    if not chosen:
        raise ReleaseError("no repository: pass --repository OWNER/NAME (the release workflow "
                           "passes $GITHUB_REPOSITORY) or add [project.urls] Repository = "
                           "\"https://github.com/OWNER/NAME\" to pyproject.toml")
    if chosen == PLACEHOLDER or not REPOSITORY.fullmatch(chosen):
        raise ReleaseError(f"--repository {chosen!r}: expected a GitHub OWNER/NAME, e.g. "
                           "octo-org/massgen-mcp")
    return chosen


def server_name(repo: str) -> str:
    return f"io.github.{repo}"


def render_server(server: dict[str, Any], repo: str, release: str,
                  bundle: Path | None = None) -> dict[str, Any]:
    """server.json for ``repo`` at version ``release``; with ``bundle``, its mcpb package."""
    rendered = {**server, "name": server_name(repo), "version": release,
                "repository": {"url": f"https://github.com/{repo}", "source": "github"}}
    packages = [{**package, "version": release} for package in server["packages"]
                if package["registryType"] != "mcpb"]
    if bundle is not None:
        packages.append({
            "registryType": "mcpb",
            "identifier": f"https://github.com/{repo}/releases/download/v{release}/{bundle.name}",
            "version": release,
            "fileSha256": hashlib.sha256(bundle.read_bytes()).hexdigest(),
            "transport": {"type": "stdio"},
        })
    rendered["packages"] = packages
    return rendered


def render_readme(text: str, repo: str) -> str:
    if len(MARKER.findall(text)) != 1:
        raise ReleaseError("README.md must hold exactly one '<!-- mcp-name: ... -->' marker")
    return MARKER.sub(f"<!-- mcp-name: {server_name(repo)} -->", text)


def check_tag(tag: str, release: str, root: Path = ROOT) -> None:
    if tag != f"v{release}":
        raise ReleaseError(f"tag {tag!r} does not name the version in massgen_mcp/_version.py "
                           f"(v{release})")
    changelog = (root / "CHANGELOG.md").read_text(encoding="utf-8")
    if not re.search(rf"^## \[{re.escape(release)}\] - \d{{4}}-\d{{2}}-\d{{2}}$", changelog,
                     flags=re.MULTILINE):
        raise ReleaseError(f"CHANGELOG.md has no dated section '## [{release}] - YYYY-MM-DD': "
                           "move the Unreleased notes there before tagging")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repository", help="OWNER/NAME on GitHub (default: "
                        "$GITHUB_REPOSITORY, else pyproject.toml's [project.urls])")
    parser.add_argument("--mcpb", type=Path, help="the .mcpb bundle the release attaches")
    parser.add_argument("--tag", help="the release tag (vX.Y.Z), checked against the version")
    parser.add_argument("--root", type=Path, default=ROOT, help="the checkout to read")
    parser.add_argument("--out", type=Path,
                        help="write server.json and README.md here (default: in place)")
    args = parser.parse_args(argv)
    try:
        release = version(args.root)
        if args.tag is not None:
            check_tag(args.tag, release, args.root)
        repo = repository(args.repository, args.root)
        if args.mcpb is not None and not args.mcpb.is_file():
            raise ReleaseError(f"--mcpb {args.mcpb}: no such file")
        server = render_server(json.loads((args.root / "server.json").read_text(
            encoding="utf-8")), repo, release, args.mcpb)
        readme = render_readme((args.root / "README.md").read_text(encoding="utf-8"), repo)
    except ReleaseError as error:
        print(f"render: {error}", file=sys.stderr)
        return 2
    out = args.out or args.root
    out.mkdir(parents=True, exist_ok=True)
    (out / "server.json").write_text(json.dumps(server, indent=2, ensure_ascii=False) + "\n",
                                     encoding="utf-8")
    (out / "README.md").write_text(readme, encoding="utf-8")
    print(f"{server['name']} {release}: server.json and README.md in {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
