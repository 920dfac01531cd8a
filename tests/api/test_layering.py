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
RUNTIME_LEAVES = {"device", "dtypes", "tensors"}


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
