"""Scheduling plugins: one module per plugin, each exporting NAME, its args dataclass and ``new``."""

__all__: list[str] = []
