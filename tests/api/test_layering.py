"""The code's layering (issue 19): ops and backends import one way, Worker has no backend branches, tools use
programs' public hooks."""

from __future__ import annotations

import ast
import inspect
import subprocess
import sys
from pathlib import Path

import pytest

import wgsentis
from wgsentis import worker

PACKAGE = Path(wgsentis.__file__).resolve().parent
# The GPU runtime's leaves, which op builders may import: they import nothing of wgsentis.ops.
RUNTIME_LEAVES = {"device", "dtypes", "tensors", "shader_gen"}  # shader_gen: the WGSL generator (imports device)


def _imports(path: Path) -> set[str]:
    """Modules ``path`` imports at module level (not inside functions)."""
    found = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
    return found


def test_ops_import_only_the_gpu_runtimes_leaves():
    for path in sorted((PACKAGE / "ops").glob("*.py")):
        backends = {m for m in _imports(path) if m.startswith("wgsentis.backends")}
        allowed = {f"wgsentis.backends.gpu.{leaf}" for leaf in RUNTIME_LEAVES} | {"wgsentis.backends.gpu",
                                                                                 "wgsentis.backends.pixel_layout"}
        assert {m.rsplit(".", 1)[0] if m.rsplit(".", 1)[0] in allowed else m for m in backends} <= allowed, path


def test_the_gpu_runtimes_leaves_import_no_ops():
    paths = [PACKAGE / "backends" / "gpu" / f"{leaf}.py" for leaf in RUNTIME_LEAVES]
    for path in [*paths, PACKAGE / "backends" / "pixel_layout.py"]:
        assert not {m for m in _imports(path) if m.startswith(("wgsentis.ops", "wgsentis.backends.gpu_"))}, path


@pytest.mark.parametrize("module", ["wgsentis.ops.conv_gpu", "wgsentis.backends.gpu_compute",
                                    "wgsentis.backends.gpu.placement", "wgsentis.ops.registry", "wgsentis.worker"])
def test_any_module_imports_first(module):
    """No import-order dependence: each module imports in a fresh interpreter before anything else."""
    done = subprocess.run([sys.executable, "-c", f"import {module}"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_worker_has_no_backend_branches():
    source = inspect.getsource(worker.Worker)
    for name in ("is BackendType", "is not BackendType", "== BackendType", "gpu_compute", "GraphProgram", "gpu ="):
        assert name not in source, name


def test_tools_reach_programs_through_public_hooks():
    """The profiler, debug CLI, viewer and tools never touch a program's private members."""
    paths = [*(PACKAGE / "profiler").glob("*.py"), PACKAGE / "debug_cli.py", PACKAGE / "viewer.py",
             *(PACKAGE.parent / "tools").glob("*.py")]
    for path in paths:
        text = path.read_text()
        for private in ("._program", "program._", "profile_layers", "last_layer_gpu_ns"):
            assert private not in text, f"{path.name}: {private}"


# -- issue 30: the structure as tools/structure.py measures it --------------------------------------------------

sys.path.insert(0, str(PACKAGE.parent / "tools"))
import structure  # noqa: E402  (tools/ is not a package)

# The one module that assembles WGSL text (issue 30: "where code must be generated, one generator module does it").
WGSL_GENERATOR = "wgsentis/backends/gpu/shader_gen.py"
# Python strings the WGSL scan matches that are not WGSL: the HTML report's JavaScript (its `let x = `).
WGSL_STRING_DEBT = {"wgsentis/profiler/html.py": 1}
# Modules still over the line limit, at most this long (a ratchet while they are cut along their roles).
LONG_MODULE_DEBT: dict[str, int] = {}
MAX_GENERIC_OP_NAMES = 20  # op-type names left in the generic modules, each a real special case


def test_no_import_cycle_in_the_package():
    """Deferred imports count: a cycle hidden inside a function is still a cycle of dependence."""
    cycles = structure.import_cycles(structure.import_edges(structure.package_modules()))
    assert cycles == [], cycles


def test_no_module_imports_another_modules_private_name():
    assert structure.private_imports(structure.package_modules()) == []


def test_wgsl_lives_in_wgsl_files_and_the_generator():
    found = structure.wgsl_strings(list(structure.package_modules().values()))
    found.pop(WGSL_GENERATOR, None)
    over = {path: count for path, count in found.items() if count > WGSL_STRING_DEBT.get(path, 0)}
    assert not over, f"WGSL written in Python (move it to a .wgsl file or {WGSL_GENERATOR}): {over}"


def test_no_module_over_the_line_limit():
    found = structure.long_modules(list(structure.package_modules().values()))
    over = {path: lines for path, lines in found.items() if lines > LONG_MODULE_DEBT.get(path, structure.LINE_LIMIT)}
    assert not over, f"modules over {structure.LINE_LIMIT} lines (cut them along their roles): {over}"


def test_generic_modules_read_op_specs_instead_of_keeping_op_tables():
    generic = [structure.PACKAGE / rel for rel in structure.GENERIC_MODULES]
    pairs = structure.op_pairs(generic, structure.op_type_names())
    assert sum(pairs.values()) <= MAX_GENERIC_OP_NAMES, pairs


def test_every_spec_facet_names_a_registered_op():
    """A spec describes an op some backend implements (a typo in a family's spec module would silently describe
    nothing)."""
    from wgsentis.ops import registry
    from wgsentis.ops.spec import FACETS, described

    known = {(domain, op) for backend in registry.BACKENDS for domain, op in registry.supported_ops(backend)}
    op_types = {op for _domain, op in known}
    for facet in sorted(FACETS):
        for spec in described(facet):
            # (FLOPs and the pruner's facets are read by op type alone, whatever the layer's domain.)
            assert (spec.domain, spec.op_type) in known or spec.op_type in op_types, \
                f"{facet}: {spec.domain or 'ai.onnx'}::{spec.op_type}"
