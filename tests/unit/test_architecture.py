"""The package graph stays acyclic at module level and node-health memory stays out of `recover`.

Every import counts (module level, inside functions, under ``TYPE_CHECKING``): a lazy or
type-only import back into a caller is still a cycle a reader has to untangle. Imports of a
package's ``__init__`` are left out, since it re-exports its modules by design.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import pytest

SRC = Path(__file__).resolve().parents[2] / "src"


def _modules(src: Path) -> dict[str, Path]:
    out: dict[str, Path] = {}
    for path in src.rglob("*.py"):
        parts = path.relative_to(src).with_suffix("").parts
        out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def import_graph(src: Path) -> dict[str, set[str]]:
    """Module -> the non-package modules of `src` it imports (absolute or relative)."""
    modules = _modules(src)
    packages = {name for name, path in modules.items() if path.name == "__init__.py"}
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        if name in packages:
            continue
        deps: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = name.split(".")[: -node.level]
                    base = ".".join([*anchor, base] if base else anchor)
                targets = [f"{base}.{alias.name}" for alias in node.names] + [base]
            deps.update(t for t in targets if t in modules and t not in packages and t != name)
        graph[name] = deps
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work: list[tuple[str, list[str]]] = [(root, sorted(graph.get(root, ())))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, todo = work[-1]
            if todo:
                nxt = todo.pop()
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, sorted(graph.get(nxt, ()))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component: list[str] = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


@pytest.mark.parametrize(("graph", "expected"), [
    ({"a": {"b"}, "b": set()}, []),
    ({"a": {"b"}, "b": {"a"}}, [["a", "b"]]),
    ({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}, [["a", "b", "c"]]),
])
def test_cycles_finds_what_it_should(graph: dict[str, set[str]], expected: list[list[str]]) -> None:
    assert cycles(graph) == expected


def test_import_graph_sees_type_only_and_relative_imports(tmp_path: Path) -> None:
    pkg = tmp_path / "p"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from p.a import A\n")
    (pkg / "a.py").write_text("from p import b\nA = 1\n")
    (pkg / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                              "    from .a import A\n")
    graph = import_graph(tmp_path)
    assert graph == {"p.a": {"p.b"}, "p.b": {"p.a"}}
    assert cycles(graph) == [["p.a", "p.b"]]


def test_no_import_cycles_between_modules() -> None:
    assert cycles(import_graph(SRC)) == []


def test_recover_does_not_use_node_health_memory() -> None:
    graph = import_graph(SRC)
    offenders = {name: sorted(d for d in deps if d.startswith("trainguard.nodehealth"))
                 for name, deps in graph.items() if name.startswith("trainguard.recover.")}
    assert {k: v for k, v in offenders.items() if v} == {}
    assert not (SRC / "trainguard" / "recover" / "health.py").exists()
