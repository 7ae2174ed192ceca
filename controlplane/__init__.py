"""edgeplane control plane (the hub): HTTP API, store, NATS bus, scheduling, federation."""

__version__ = "0.1.0"
