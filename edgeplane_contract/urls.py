"""URLs as they may be shown: in banners, logs and error messages, never with a password."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

__all__ = ["mask_url"]


def mask_url(url: str) -> str:
    """The URL with any password replaced by ``***`` (for banners and logs); a comma-separated
    list of URLs (several servers) is masked URL by URL."""
    if "," in url:
        return ",".join(mask_url(part) for part in url.split(","))
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparsable URL>"
    if parts.password is None:
        return url
    user = parts.username or ""
    host = parts.hostname or ""
    if parts.port is not None:
        host = f"{host}:{parts.port}"
    return urlunsplit(parts._replace(netloc=f"{user}:***@{host}"))
