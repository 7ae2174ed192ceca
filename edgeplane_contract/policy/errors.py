"""Why a shipped policy model could not be used (the runtime falls back to the heuristic)."""

from __future__ import annotations

from edgeplane_contract.errors import EdgeplaneError

__all__ = ["ModelIncompatibleError", "ModelLoadError"]


class ModelLoadError(EdgeplaneError):
    """The model or its metadata is missing, unreadable or corrupt."""

    code = "model"

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"{path}: {reason}")
        self.path = path
        self.reason = reason


class ModelIncompatibleError(ModelLoadError):
    """The model was built for another feature schema or action space than this runtime's."""

    def __init__(self, path: str, field: str, expected: object, found: object) -> None:
        super().__init__(path, f"incompatible {field}: runtime expects {expected!r}, model has {found!r}")
        self.field = field
        self.expected = expected
        self.found = found
