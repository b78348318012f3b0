"""The installed size of massgen-mcp with its dependencies in a fresh virtualenv
(``python bench/run.py --only install_size``).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from bench.scenarios import HERE


def _site_packages_mib(venv: Path) -> float:
    site = next(venv.glob("lib/python*/site-packages"))
    total = sum(p.stat().st_size for p in site.rglob("*") if p.is_file())
    return round(total / 2**20, 1)


def bench_install_size(quick: bool) -> dict[str, Any]:
    """Installed size of massgen-mcp with its dependencies in a fresh virtualenv."""
    root = HERE.parent
    out: dict[str, Any] = {"target_mib": 450}
    with tempfile.TemporaryDirectory() as tmp:
        venv = Path(tmp) / "venv"
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q",
               "-c", str(root / ".ci" / "constraints.txt")]
        base = _site_packages_mib(venv)
        subprocess.run([*pip, str(root)], check=True, capture_output=True)
        out["installed_mib"] = round(_site_packages_mib(venv) - base, 1)
        subprocess.run([*pip, f"{root}[local]"], check=True, capture_output=True)
        out["with_local_mib"] = round(_site_packages_mib(venv) - base, 1)
    return out


def print_install_size(data: dict[str, Any]) -> None:
    print(f"\ninstalled size: {data['installed_mib']} MiB (target <= {data['target_mib']}); "
          f"with [local]: {data['with_local_mib']} MiB")
