"""URLs: one key per page however it was written (scheme, default port, tracking parameters)."""

from __future__ import annotations

import posixpath
import re
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from memoryd.vocabulary import URL
from workers.stages.entities.model import Entity

_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443, "ftp": 21}
_TRACKING = re.compile(r"^(utm_\w+|fbclid|gclid|mc_cid|mc_eid|ref_src)$", re.I)
_BARE_HOST = re.compile(r"^[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)+(:\d+)?(/|$)")


def canonical_url(url: str | None) -> Entity | None:
    """Normalise a URL: lower-case scheme and host, no credentials, no default port, no
    fragment, dot segments removed, tracking parameters dropped, other parameters sorted."""
    if not url or not url.strip():
        return None
    raw = url.strip()
    text = raw if "://" in raw else ("https://" + raw if _BARE_HOST.match(raw) else "")
    if not text:
        return None
    try:
        parts = urlsplit(text)
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower().rstrip(".")
    if not host:
        return None
    netloc = host if port in (None, _DEFAULT_PORTS.get(scheme)) else f"{host}:{port}"
    path = posixpath.normpath(parts.path) if parts.path not in ("", "/") else "/"
    if parts.path.endswith("/") and path != "/":
        path += "/"
    query = urlencode(
        sorted(
            (k, v)
            for k, v in parse_qsl(parts.query, keep_blank_values=True)
            if not _TRACKING.match(k)
        )
    )
    key = urlunsplit((scheme, netloc, path, query, ""))
    return Entity(URL, key, raw, host)
