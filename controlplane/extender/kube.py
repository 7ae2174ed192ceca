"""The wire types of ``k8s.io/kube-scheduler/extender/v1``, as kube-scheduler encodes them.

The Go structs carry no JSON tags, so their keys are the field names (``Pod``, ``NodeNames``,
``FailedNodes``, ``Host``, ...) and a nil pointer is ``null``; the Pod and Node objects inside
are ordinary API objects (camelCase keys). kube-scheduler sends ``Nodes`` (a NodeList) or, with
``nodeCacheCapable: true``, ``NodeNames``; the answer uses the same field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from controlplane.errors import ValidationError

__all__ = [
    "MAX_EXTENDER_PRIORITY",
    "ExtenderArgs",
    "ExtenderFilterResult",
    "HostPriority",
    "KubeNode",
    "as_list",
    "as_object",
]

MAX_EXTENDER_PRIORITY = 10
"""kube's ``MaxExtenderPriority``: prioritize scores run from 0 to this."""


def as_object(value: object, field: str, *, optional: bool = False) -> Mapping[str, Any]:
    """``value`` as a JSON object (``optional``: ``null`` is an empty one), or a ValidationError
    naming ``field``."""
    if value is None and optional:
        return {}
    if not isinstance(value, Mapping):
        raise ValidationError("must be an object", field=field)
    return value


def as_list(value: object, field: str) -> list[Any]:
    """``value`` as a JSON array (``null`` is an empty one, as Go decodes it)."""
    if value is None:
        return []
    if not isinstance(value, list):
        raise ValidationError("must be an array", field=field)
    return value


@dataclass(frozen=True, slots=True)
class KubeNode:
    """A Kubernetes node as the extender sees it: its name, its labels and, in the NodeList form,
    the object itself (echoed back in the filter's answer)."""

    name: str
    labels: Mapping[str, str] = field(default_factory=dict)
    obj: Mapping[str, Any] | None = None

    @classmethod
    def from_json(cls, value: object, where: str) -> KubeNode:
        node = as_object(value, where)
        meta = as_object(node.get("metadata"), f"{where}.metadata")
        name = meta.get("name")
        if not isinstance(name, str) or not name:
            raise ValidationError("must be a non-empty string", field=f"{where}.metadata.name")
        labels = as_object(meta.get("labels"), f"{where}.metadata.labels", optional=True)
        return cls(name, {str(k): str(v) for k, v in labels.items()}, node)


@dataclass(frozen=True, slots=True)
class ExtenderArgs:
    """What kube-scheduler posts to the filter and prioritize verbs."""

    pod: Mapping[str, Any]
    nodes: tuple[KubeNode, ...]
    node_names_form: bool
    """True when the nodes came as ``NodeNames`` (nodeCacheCapable), False for ``Nodes``."""

    @classmethod
    def from_json(cls, body: object) -> ExtenderArgs:
        args = as_object(body, "ExtenderArgs")
        pod = as_object(args.get("Pod"), "Pod")
        names, node_list = args.get("NodeNames"), args.get("Nodes")
        if names is not None and node_list is not None:
            raise ValidationError("give Nodes or NodeNames, not both", field="NodeNames")
        if names is not None:
            nodes = []
            for i, name in enumerate(as_list(names, "NodeNames")):
                if not isinstance(name, str) or not name:
                    raise ValidationError("must be a non-empty string", field=f"NodeNames[{i}]")
                nodes.append(KubeNode(name))
            return cls(pod, tuple(nodes), True)
        if node_list is None:
            raise ValidationError("one of Nodes or NodeNames is required", field="NodeNames")
        items = as_list(as_object(node_list, "Nodes").get("items"), "Nodes.items")
        return cls(pod, tuple(KubeNode.from_json(n, f"Nodes.items[{i}]") for i, n in enumerate(items)), False)


@dataclass(slots=True)
class ExtenderFilterResult:
    """The filter verb's answer. Nodes in ``failed_and_unresolvable`` are not in ``failed`` (kube
    gives the former precedence; preemption is not tried for them)."""

    passed: list[KubeNode] = field(default_factory=list)
    node_names_form: bool = True
    failed: dict[str, str] = field(default_factory=dict)
    failed_and_unresolvable: dict[str, str] = field(default_factory=dict)
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        nodes: dict[str, Any] | None = None
        names: list[str] | None = None
        if not self.error:  # upstream's extenders answer an error with no node list
            if self.node_names_form:
                names = [n.name for n in self.passed]
            else:
                nodes = {"metadata": {}, "items": [dict(n.obj or {}) for n in self.passed]}
        return {
            "Nodes": nodes,
            "NodeNames": names,
            "FailedNodes": dict(self.failed),
            "FailedAndUnresolvableNodes": dict(self.failed_and_unresolvable),
            "Error": self.error,
        }


@dataclass(frozen=True, slots=True)
class HostPriority:
    """One entry of the prioritize verb's answer (a ``HostPriorityList``)."""

    host: str
    score: int

    def to_json(self) -> dict[str, Any]:
        return {"Host": self.host, "Score": self.score}
