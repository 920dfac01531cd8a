"""Static measures of wgsentis's structure (issue 30): import cycles, imports of other modules' private names,
WGSL written as Python strings, modules over the line limit, and op-type tables in generic modules.

Run ``python tools/structure.py`` for a report, ``--json`` for the numbers; ``tests/api/test_layering.py`` reads
the same functions as its guard.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "wgsentis"
LINE_LIMIT = 700
# Modules that must read op knowledge from specs rather than keep their own per-op tables.
GENERIC_MODULES = ("budget.py", "profiler/prune_model.py", "profiler/prune_channels.py", "profiler/prune_constants.py",
                   "backends/gpu/outer_tiles.py", "backends/gpu/program.py", "profiler/flops.py", "onnx_checks.py",
                   "backends/gpu/placement.py", "backends/gpu/layer_build.py", "backends/gpu/recording.py",
                   "backends/gpu/subgraphs.py", "backends/gpu/replay.py")
# Tokens that mark a string literal as WGSL source.
WGSL_MARKERS = re.compile(r"@(fragment|vertex|compute|group|binding|builtin|location)\b|\bfn \w+\(|var<|\bvec[234]<"
                          r"|\btextureLoad\(|\barray<|\b(x\d|pe|pu|pei|pef|pf|pi)\(\d*u?\)|\bbitcast<|\b[iu]32\(|\bf32\("
                          r"|\bselect\(|\blet \w+ = |\bvar \w+ = |\bfor \(var ")
# (Bodies and expressions count too: a shader's statements or an op's WGSL expression written in Python.)


@dataclass
class Report:
    """What the scans found; each list names the sites."""

    cycles: list[list[str]] = field(default_factory=list)
    private_imports: list[str] = field(default_factory=list)
    wgsl_strings: dict[str, int] = field(default_factory=dict)
    long_modules: dict[str, int] = field(default_factory=dict)
    op_pairs: dict[str, int] = field(default_factory=dict)

    def numbers(self) -> dict[str, int]:
        return {"import_cycles": len(self.cycles), "private_imports": len(self.private_imports),
                "wgsl_string_sites": sum(self.wgsl_strings.values()),
                "wgsl_string_modules": len(self.wgsl_strings), "modules_over_limit": len(self.long_modules),
                "generic_op_pairs": sum(self.op_pairs.values())}


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def package_modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _resolve(module: str, node: ast.ImportFrom, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    base = module.split(".") if is_package else module.split(".")[:-1]
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def import_edges(modules: dict[str, Path]) -> dict[str, set[str]]:
    """Each module's imports of other wgsentis modules, at any depth of the file (deferred imports count: they
    are the same dependence, only hidden from the import-time check)."""
    edges: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = _resolve(name, node, path.name == "__init__.py")
                targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base
                           for alias in node.names]
            for target in targets:
                while target and target not in modules:
                    target = target.rpartition(".")[0]
                if target and target != name and target != "wgsentis":
                    edges[name].add(target)
    return edges


def import_cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = [0]

    def visit(node: str) -> None:
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10000)
    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found


def private_imports(modules: dict[str, Path]) -> list[str]:
    """``from wgsentis.x import _name`` where ``_name`` is private to another module."""
    sites = []
    for name, path in modules.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.ImportFrom):
                continue
            base = _resolve(name, node, path.name == "__init__.py")
            if not base.startswith("wgsentis") or base == name:
                continue
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    sites.append(f"{path.relative_to(ROOT)}:{node.lineno} {base}.{alias.name}")
    return sites


def _docstrings(tree: ast.AST) -> set[int]:
    """ids of the module's, classes' and functions' docstring constants (prose about WGSL is not WGSL)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found


def wgsl_strings(paths: list[Path]) -> dict[str, int]:
    """String literals (f-strings' parts included) that hold WGSL source (a declaration, a statement or an
    expression in WGSL's own syntax), per module; docstrings aside."""
    found: dict[str, int] = {}
    for path in paths:
        tree = ast.parse(path.read_text())
        skip = _docstrings(tree)
        count = sum(1 for node in ast.walk(tree)
                    if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip
                    and WGSL_MARKERS.search(node.value))
        if count:
            found[str(path.relative_to(ROOT))] = count
    return found


def long_modules(paths: list[Path]) -> dict[str, int]:
    return {str(path.relative_to(ROOT)): lines for path in paths
            if (lines := len(path.read_text().splitlines())) > LINE_LIMIT}


def op_type_names() -> set[str]:
    """Every op type wgsentis registers or the ONNX standard defines."""
    names: set[str] = set()
    try:
        import onnx.defs

        names.update(schema.name for schema in onnx.defs.get_all_schemas_with_history())
    except ImportError:
        pass
    from wgsentis.ops import registry

    names.update(op for op, _domain in registry.supported_ops())
    # Words that are op names but read as ordinary English in messages and docstrings.
    return {name for name in names if len(name) > 2}


def op_pairs(paths: list[Path], ops: set[str]) -> dict[str, int]:
    """(module, op) pairs: distinct op-type names written as string literals in a generic module."""
    found: dict[str, int] = {}
    for path in paths:
        seen = {node.value for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in ops}
        if seen:
            found[str(path.relative_to(ROOT))] = len(seen)
    return found


def scan() -> Report:
    modules = package_modules()
    paths = list(modules.values())
    report = Report()
    report.cycles = import_cycles(import_edges(modules))
    report.private_imports = private_imports(modules)
    report.wgsl_strings = wgsl_strings(paths)
    report.long_modules = long_modules(paths)
    report.op_pairs = op_pairs([PACKAGE / rel for rel in GENERIC_MODULES], op_type_names())
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="print the numbers as JSON")
    args = parser.parse_args(argv)
    report = scan()
    if args.json:
        print(json.dumps(report.numbers(), indent=2))
        return 0
    for key, value in report.numbers().items():
        print(f"{key:24s} {value}")
    print("\nimport cycles:")
    for cycle in report.cycles:
        print("  " + " <-> ".join(cycle))
    print("\nprivate imports:")
    for site in report.private_imports:
        print("  " + site)
    print("\nWGSL string sites per module:")
    for path, count in sorted(report.wgsl_strings.items(), key=lambda item: -item[1]):
        print(f"  {count:4d} {path}")
    print(f"\nmodules over {LINE_LIMIT} lines:")
    for path, lines in sorted(report.long_modules.items(), key=lambda item: -item[1]):
        print(f"  {lines:5d} {path}")
    print("\nop-type names in generic modules:")
    for path, count in sorted(report.op_pairs.items(), key=lambda item: -item[1]):
        print(f"  {count:4d} {path}")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
