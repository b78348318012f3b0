"""Network words: which hosts are this machine (a key may go there without consent, an HTTP
server may listen there without a token)."""

from __future__ import annotations

import ipaddress


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False
