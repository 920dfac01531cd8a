"""The operator registry, keyed by backend: one register/lookup for numpy kernels and GPU program builders,
and every GPU builder registered by the `_gpu.py` module of its own op family (no import-order games)."""

from __future__ import annotations

import dataclasses

import pytest

import wgsentis.ops  # noqa: F401  (every family registers)
from wgsentis.ops import registry

DOMAIN = "test.wgsentis.registry"


def _kernel(ctx, x, *, alpha=1.0):
    return x


def _builder(rec, layer, x):
    return NotImplemented


def test_one_registry_keyed_by_backend():
    registry.register("Twice", 3, DOMAIN)(_kernel)
    registry.register("Twice", 5, DOMAIN, backend="gpu-compute", host_inputs=(1,))(_builder)
    cpu = registry.lookup("Twice", DOMAIN, 7)
    gpu = registry.lookup("Twice", DOMAIN, 7, backend="gpu-compute")
    assert isinstance(cpu, registry.OpImpl) and cpu.kernel is _kernel and cpu.attr_names == {"alpha"}
    assert isinstance(gpu, registry.GPUImpl) and gpu.build is _builder and gpu.host_inputs == (1,)
    assert registry.lookup("Twice", DOMAIN, 4, backend="gpu-compute") is None  # below its since
    assert registry.lookup("Twice", DOMAIN, 7, backend="gpu-pixel") is None  # room for the next backend
    assert ("test.wgsentis.registry", "Twice") in registry.supported_ops("gpu-compute")


def test_registry_refuses_what_does_not_apply():
    with pytest.raises(ValueError, match="unknown backend"):
        registry.register("Twice", 1, DOMAIN, backend="webgl")
    with pytest.raises(ValueError, match="unknown backend"):
        registry.lookup("Relu", "", 13, backend="webgl")
    with pytest.raises(ValueError, match="host_inputs"):
        registry.register("Twice", 1, DOMAIN, host_inputs=(1,))  # CPU kernels read every input on the host
    with pytest.raises(ValueError, match="deterministic"):
        registry.register("Twice", 1, DOMAIN, backend="gpu-compute", deterministic=False)


def test_op_impl_carries_no_unread_metadata():
    fields = {f.name for f in dataclasses.fields(registry.OpImpl)}
    assert "host_only_inputs" not in fields and "meta" not in fields


def test_gpu_aliases_are_gone():
    assert not hasattr(registry, "register_gpu") and not hasattr(registry, "lookup_gpu")
    assert registry.lookup("Relu", "", 14, backend="gpu-compute") is not registry.lookup("Relu", "", 14)


def test_every_gpu_builder_lives_in_its_familys_gpu_module():
    """The builder of an op is registered by ``<family>_gpu.py`` where ``<family>.py`` holds its numpy kernel
    (the activations' kernels are the elementwise family's; ml_transforms.py is the ml family, contrib_attention.py
    the contrib family)."""
    family = {"activations": "elementwise", "numeric": "elementwise", "ml_transforms": "ml",
              "contrib_attention": "contrib"}
    cpu_ops = registry.supported_ops("cpu")
    wrong = []
    for (domain, op), versions in registry.supported_ops("gpu-compute").items():
        if domain == DOMAIN:
            continue
        kernels = [registry.lookup(op, domain, since).kernel for since in cpu_ops[(domain, op)]]
        owners = {family.get(name, name) + "_gpu" for name in (k.__module__.rsplit(".", 1)[1] for k in kernels)}
        for since in versions:
            build = registry.lookup(op, domain, since, backend="gpu-compute").build
            while hasattr(build, "__wrapped__"):  # refusing() and the like
                build = build.__wrapped__
            if {build.__module__.rsplit(".", 1)[1]} != owners:
                wrong.append((op, since, build.__module__, sorted(owners)))
    assert not wrong
