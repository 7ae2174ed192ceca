"""The import graph of the project: one contract both sides import, and no import cycle.

Rules (docs/architecture.md):

* ``edge_agent`` imports nothing of ``controlplane`` (the agent depends on the contract only);
* ``edgeplane_contract`` imports neither ``controlplane`` nor ``edge_agent``;
* no import cycle between files of ``edgeplane_contract``, ``edge_agent`` or
  ``controlplane.scheduling``; elsewhere, only the cycles listed in :data:`KNOWN_CYCLES`.

The graph is built from the source with ``ast`` (nothing is imported or executed). EVERY import
statement counts: at module level, inside functions (lazy imports) and under
``if TYPE_CHECKING:``. Type-only imports count because they still tie the files together: mypy,
a reader and any later move must follow them, and a cycle made of them is one ``from x import
y`` away from a circular-import error at run time.

An edge goes from a file to the project module it names: ``import a.b`` and ``from a import b``
(when ``a/b.py`` or ``a/b/__init__.py`` exists) name ``a.b``; ``from a.b import name`` names
``a.b``. Importing ``a.b`` also runs ``a/__init__.py``; that implicit edge to the parent package
is not drawn (each file's own imports are its dependencies, as import-linter/grimp count them).
"""

from __future__ import annotations

import ast
from collections import deque
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("controlplane", "edge_agent", "edgeplane_contract")

# Import cycles (strongly connected sets of files) allowed to remain. None since issue 12 step 2
# (the bid round and the function service take narrow views of the hub, controlplane/fleet/nodes.py,
# instead of importing hub.service): any cycle anywhere fails the test.
KNOWN_CYCLES: frozenset[frozenset[str]] = frozenset()

# Where no cycle at all is allowed (module name prefixes).
ACYCLIC = ("edgeplane_contract", "edge_agent", "controlplane.scheduling")


@dataclass(frozen=True, slots=True)
class Edge:
    source: str
    target: str
    line: int
    type_checking: bool

    def __str__(self) -> str:
        where = " (under TYPE_CHECKING)" if self.type_checking else ""
        return f"{self.source} -> {self.target} (line {self.line}){where}"


def _modules() -> dict[str, Path]:
    found: dict[str, Path] = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def _is_type_checking(test: ast.expr) -> bool:
    return (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING") or (
        isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING"
    )


def _imports(tree: ast.AST) -> list[tuple[ast.Import | ast.ImportFrom, bool]]:
    """Every import statement of a file, with whether it sits under ``if TYPE_CHECKING:``."""
    out: list[tuple[ast.Import | ast.ImportFrom, bool]] = []

    def visit(node: ast.AST, type_checking: bool) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            out.append((node, type_checking))
        if isinstance(node, ast.If) and _is_type_checking(node.test):
            for child in node.body:
                visit(child, True)
            for child in node.orelse:
                visit(child, type_checking)
            return
        for child in ast.iter_child_nodes(node):
            visit(child, type_checking)

    visit(tree, False)
    return out


def _owner(name: str, modules: dict[str, Path]) -> str | None:
    """The project module ``name`` is, or is inside of (None: not ours)."""
    while name and name not in modules:
        name = name.rpartition(".")[0]
    return name or None


def build_graph() -> tuple[dict[str, Path], list[Edge]]:
    modules = _modules()
    edges: list[Edge] = []
    for module, path in modules.items():
        is_package = path.name == "__init__.py"
        for node, type_checking in _imports(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            else:
                base = node.module or ""
                if node.level:
                    anchor = module.split(".") if is_package else module.split(".")[:-1]
                    anchor = anchor[: len(anchor) - (node.level - 1)]
                    base = ".".join([*anchor, base] if base else anchor)
                for alias in node.names:
                    sub = f"{base}.{alias.name}"
                    targets.append(sub if sub in modules else base)
            for target in targets:
                owner = _owner(target, modules)
                edge = Edge(module, owner or "", node.lineno, type_checking)
                if owner is not None and owner != module and edge not in edges:
                    edges.append(edge)
    return modules, edges


def _adjacency(edges: list[Edge]) -> dict[str, dict[str, Edge]]:
    adj: dict[str, dict[str, Edge]] = {}
    for edge in edges:
        adj.setdefault(edge.source, {}).setdefault(edge.target, edge)
    return adj


def strongly_connected(modules: dict[str, Path], edges: list[Edge]) -> list[frozenset[str]]:
    """Sets of files that import each other (directly or not): the import cycles (Tarjan)."""
    adj = _adjacency(edges)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    counter = 0
    for root in sorted(modules):
        if root in index:
            continue
        # Iterative Tarjan: (node, iterator over its successors).
        work = [(root, iter(sorted(adj.get(root, {}))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, successors = work[-1]
            advanced = False
            for succ in successors:
                if succ not in index:
                    index[succ] = low[succ] = counter
                    counter += 1
                    stack.append(succ)
                    on_stack.add(succ)
                    work.append((succ, iter(sorted(adj.get(succ, {})))))
                    advanced = True
                    break
                if succ in on_stack:
                    low[node] = min(low[node], index[succ])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(frozenset(component))
    return sorted(found, key=lambda c: sorted(c))


def one_cycle(component: frozenset[str], edges: list[Edge]) -> list[Edge]:
    """A shortest cycle through the first file of ``component`` (for the failure message)."""
    adj = _adjacency(edges)
    start = min(component)
    previous: dict[str, Edge] = {}
    queue = deque([start])
    while queue:
        node = queue.popleft()
        for succ, edge in sorted(adj.get(node, {}).items()):
            if succ not in component:
                continue
            if succ == start:
                path = [edge]
                while path[0].source != start:
                    path.insert(0, previous[path[0].source])
                return path
            if succ not in previous:
                previous[succ] = edge
                queue.append(succ)
    raise AssertionError(f"no cycle through {start}")  # pragma: no cover: a component has one


def _describe(component: frozenset[str], edges: list[Edge]) -> str:
    cycle = "\n      ".join(str(e) for e in one_cycle(component, edges))
    return f"  {sorted(component)}\n    e.g.\n      {cycle}"


def _inside(module: str, prefix: str) -> bool:
    return module == prefix or module.startswith(prefix + ".")


def test_the_graph_sees_the_project() -> None:
    """Guard against a silently empty graph (a walker bug would pass every rule below)."""
    modules, edges = build_graph()
    assert len(modules) > 100
    targets = {(e.source, e.target) for e in edges}
    assert ("controlplane.hub.placing", "controlplane.hub.bidding") in targets  # module level
    assert ("controlplane.commands.up", "controlplane.errors") in targets  # inside a function
    assert ("controlplane.scheduling.framework", "controlplane.scheduling.ledger") in targets  # type-only
    assert any(e.type_checking for e in edges)


def test_the_agent_imports_nothing_of_the_hub() -> None:
    _, edges = build_graph()
    bad = [e for e in edges if _inside(e.source, "edge_agent") and _inside(e.target, "controlplane")]
    assert not bad, "edge_agent must not import controlplane (use edgeplane_contract):\n" + "\n".join(
        f"  {e}" for e in bad
    )


def test_the_contract_imports_neither_side() -> None:
    _, edges = build_graph()
    bad = [
        e
        for e in edges
        if _inside(e.source, "edgeplane_contract")
        and (_inside(e.target, "controlplane") or _inside(e.target, "edge_agent"))
    ]
    assert not bad, "edgeplane_contract must import neither controlplane nor edge_agent:\n" + "\n".join(
        f"  {e}" for e in bad
    )


def test_no_cycle_in_the_contract_the_agent_or_the_scheduler() -> None:
    modules, edges = build_graph()
    cycles = [
        c
        for c in strongly_connected(modules, edges)
        if any(_inside(m, prefix) for m in c for prefix in ACYCLIC)
    ]
    assert not cycles, f"import cycles among files of {', '.join(ACYCLIC)}:\n" + "\n".join(
        _describe(c, edges) for c in cycles
    )


def test_no_new_cycle_anywhere() -> None:
    modules, edges = build_graph()
    cycles = strongly_connected(modules, edges)
    print("import cycles in controlplane, edge_agent and edgeplane_contract:")
    for component in cycles:
        print(_describe(component, edges))
    new = [c for c in cycles if c not in KNOWN_CYCLES]
    assert not new, "import cycles not in KNOWN_CYCLES (break them; do not list them):\n" + "\n".join(
        _describe(c, edges) for c in new
    )
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in cycles]
    assert not gone, f"cycles in KNOWN_CYCLES no longer exist; remove them from the list: {gone}"


# The domain packages and the adapters and entry points that drive them: the composition root
# (controlplane/runtime) wires them together, so the domain never imports an adapter.
DOMAIN = ("controlplane.hub", "controlplane.scheduling", "controlplane.serverless", "controlplane.store")
ADAPTERS = ("controlplane.api", "controlplane.extender", "controlplane.commands", "controlplane.runtime")


def test_the_domain_packages_import_no_adapter_and_nothing_imports_the_composition_root():
    _, edges = build_graph()
    inward = [str(e) for e in edges if e.source.startswith(DOMAIN) and e.target.startswith(ADAPTERS)]
    assert inward == [], "a domain package imports an adapter:\n" + "\n".join(inward)
    into_root = [
        str(e)
        for e in edges
        if e.target.startswith("controlplane.runtime")
        and not e.source.startswith(("controlplane.runtime", "controlplane.commands"))
    ]
    assert into_root == [], "only the entry points start the composition root:\n" + "\n".join(into_root)


# Sub-packages of controlplane that import each other (each a command line reaching for the
# other's library, lazily): every other tie between two sub-packages goes one way.
KNOWN_TWO_WAY: frozenset[frozenset[str]] = frozenset(
    {
        frozenset({"learn", "sim"}),  # simulate --placement-model loads learn's chooser
        frozenset({"policies", "policy"}),  # the policy command line's client verbs
    }
)


def _package(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if parts[0] == "controlplane" and len(parts) > 2 else None


def test_the_packages_of_the_hub_tie_one_way() -> None:
    """hub -> serverless, hub -> observe, bus -> ...: never both ways (the views of the nodes live
    in ``fleet``, the specs in ``specs``, below the packages that share them)."""
    _, edges = build_graph()
    ties: dict[tuple[str, str], Edge] = {}
    for edge in edges:
        source, target = _package(edge.source), _package(edge.target)
        if source and target and source != target:
            ties.setdefault((source, target), edge)
    both = sorted(
        {frozenset(pair) for pair in ties if (pair[1], pair[0]) in ties} - KNOWN_TWO_WAY, key=sorted
    )
    assert not both, "sub-packages that import each other:\n" + "\n".join(
        f"  {' <-> '.join(sorted(p))}: e.g. {ties[tuple(sorted(p))]} and "
        f"{ties[tuple(sorted(p, reverse=True))]}"
        for p in both
    )
    gone = [sorted(p) for p in KNOWN_TWO_WAY if not all(pair in ties for pair in (tuple(p), tuple(p)[::-1]))]
    assert not gone, f"ties in KNOWN_TWO_WAY go one way now; remove them: {gone}"
