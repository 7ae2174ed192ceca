"""edgeplane edge agent: telemetry, local execution, local policy."""

__version__ = "0.1.0"
