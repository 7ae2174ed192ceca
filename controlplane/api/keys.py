"""Typed application keys shared by the route modules."""

from __future__ import annotations

from aiohttp import web

from controlplane.hub.service import Hub

__all__ = ["HUB"]

HUB = web.AppKey("hub", Hub)
