"""The CPU backend keeps the memory a run frees for the next run (wgsentis.backends.host_memory): a
model whose layers allocate large outputs faults almost no pages in again on later runs. Each variant
runs in a fresh interpreter, since glibc's thresholds are process-wide and move with what ran before."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest

from wgsentis.backends import host_memory

_SCRIPT = """
import resource, sys
import numpy as np
from onnx import TensorProto, helper
import wgsentis as ws
import wgsentis.backends.host_memory as host_memory
if sys.argv[1] == "glibc-default":
    host_memory._done = True  # as if already raised: leaves glibc's policy as it is
# An upsampling chain and back (a detection head's shape): outputs from 0.2 to 13 MiB, freed as it goes.
shape = [1, 8, 80, 80]
nodes, previous = [], "x"
for i in range(3):
    nodes += [helper.make_node("Resize", [previous, "", "scales"], [f"r{i}"], mode="nearest"),
              helper.make_node("Relu", [f"r{i}"], [f"a{i}"])]
    previous = f"a{i}"
for i in range(3):
    nodes.append(helper.make_node("MaxPool", [previous], [f"p{i}"], kernel_shape=[2, 2], strides=[2, 2]))
    previous = f"p{i}"
nodes.append(helper.make_node("Add", [previous, "x"], ["y"]))
graph = helper.make_graph(nodes, "upsampling", [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
                          [helper.make_tensor("scales", TensorProto.FLOAT, [4], [1, 1, 2, 2])])
model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
x = np.ones(shape, np.float32)
with ws.Worker(ws.load_model(model), "cpu", threads=2) as worker:
    for _ in range(3):
        worker.run({"x": x})
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    worker.run({"x": x})
    print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def _faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", _SCRIPT, mode], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return int(done.stdout.split()[-1])


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the thresholds are glibc's")
def test_later_runs_reuse_the_memory_earlier_runs_freed():
    assert host_memory.keep_freed_memory()
    kept, default = _faults("kept"), _faults("glibc-default")
    # glibc's default policy gives part of each run's memory back and faults it in again on the next run
    # (PP-OCR det: ~6000 pages per run); kept, the later runs fault in next to nothing.
    assert default > 300, default
    assert kept < 50, (kept, default)
