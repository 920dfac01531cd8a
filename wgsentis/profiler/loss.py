"""Sparsify's loss profile: for every prunable layer and sparsity level, that layer alone magnitude-pruned
and how the model's outputs move (relative L2, KL of classifier-like outputs, top-1 agreement).

It sits above the performance profile (it may time each layer's dense run with ``profile``) and above the
pruning mechanics of ``wgsentis.profiler.pruning``; neither of those imports it.
"""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import numpy as np

from wgsentis.backends.cpu import GraphProgram
from wgsentis.errors import InputError
from wgsentis.profiler.flops import layer_costs, prunable_weight, tensor_facts
from wgsentis.profiler.profile import model_of, profile
from wgsentis.profiler.pruning import flat_outputs, prune
from wgsentis.shapes import sample_inputs
from wgsentis.worker import Worker, backend_of

DEFAULT_LEVELS = (0.4, 0.6, 0.8, 0.9, 0.95)
LOSS_FORMAT = "wgsentis-loss-profile/1"
METRICS = {
    "rel_l2": "||y_pruned - y|| / ||y|| over all float outputs",
    "kl": "KL(p_dense || p_pruned) in nats, mean over items of classifier-like outputs (softmax of logits)",
    "top1_agreement": "fraction of items whose arg-max class is unchanged, classifier-like outputs",
}


class LossProfile:
    """A model's loss profile (``loss_profile``): ``data`` is the JSON document (docs/profiler.md)."""

    def __init__(self, data: dict[str, Any]) -> None:
        self.data = data

    def __getitem__(self, key: str) -> Any:
        return self.data[key]

    def __repr__(self) -> str:
        return (f"LossProfile({self.data['name']!r}, {len(self.data['layers'])} layers, levels "
                f"{self.data['levels']}, inputs {self.data['inputs']})")

    @property
    def layers(self) -> list[dict[str, Any]]:
        return self.data["layers"]

    def to_dict(self) -> dict[str, Any]:
        return self.data

    def to_json(self, path: Any) -> Any:
        """Write ``{"loss_profile": ...}`` as JSON; returns the path."""
        from pathlib import Path

        path = Path(path)
        path.write_text(json.dumps({"loss_profile": self.data}, indent=1))
        return path

    @classmethod
    def from_json(cls, path: Any) -> LossProfile:
        from pathlib import Path

        from wgsentis.errors import InputError

        try:
            doc = json.loads(Path(path).read_text())
            return cls(doc["loss_profile"] if "loss_profile" in doc else doc)
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise InputError(f"'{path}' is not a wgsentis loss profile: {exc}") from None

    def table(self, top: int = 20) -> str:
        """The most sensitive layers, one column per level (rel_l2; KL and top-1 for classifiers)."""
        d = self.data
        lines = [f"loss profile  {d['name']}  inputs {d['inputs']}"
                 + ("" if d["inputs"] == "user" else " (seeded random: give real inputs for a faithful profile)"),
                 f"levels {', '.join(f'{s:g}' for s in d['levels'])}; sensitivity = mean rel_l2 over the levels"
                 + ("" if d["complete"] else f"; STOPPED by the time budget after {d['profiled_layers']} of "
                    f"{len(d['layers'])} layers")]
        rows = sorted((e for e in d["layers"] if e["sensitivity"] is not None), key=lambda e: -e["sensitivity"])
        w = max([len(e["name"]) for e in rows[:top]] + [5])
        head = f"{'layer':<{w}}  {'op':<14} {'params':>10} {'sens.':>8}  " + " ".join(
            f"{'rel@' + format(s, 'g'):>9}" for s in d["levels"])
        lines += ["", head]
        for e in rows[:top]:
            cells = " ".join(f"{lv['rel_l2']:>9.2e}" for lv in e["levels"])
            lines.append(f"{e['name']:<{w}}  {e['op_type']:<14} {e['params']:>10,} {e['sensitivity']:>8.2e}  {cells}")
        classifier = [e for e in rows if e["levels"] and e["levels"][-1]["top1_agreement"] is not None]
        if classifier:
            worst = min(classifier, key=lambda e: e["levels"][-1]["top1_agreement"])
            lines.append(f"\ntop-1 agreement at {d['levels'][-1]:g}: lowest {worst['levels'][-1]['top1_agreement']:.3f}"
                         f" ({worst['name']})")
        return "\n".join(lines)


def _classifier_probs(value: Any) -> np.ndarray | None:
    """(N, C) probabilities of a classifier-like output, or None."""
    if not isinstance(value, np.ndarray) or value.dtype.kind != "f" or value.ndim < 2:
        return None
    shape = list(value.shape)
    while len(shape) > 2 and shape[-1] == 1:
        shape.pop()
    if len(shape) != 2 or shape[1] < 2 or not shape[0]:
        return None
    x = value.reshape(shape).astype(np.float64)
    if not np.isfinite(x).all():
        return None
    if x.min() >= 0 and x.max() <= 1 and np.allclose(x.sum(axis=1), 1, atol=1e-3):
        return x
    e = np.exp(x - x.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


def _metrics(reference: list[Any], outputs: list[Any], norm: float) -> dict[str, float | None]:
    ref_flat, out_flat = flat_outputs(reference), flat_outputs(outputs)
    rel = float(np.linalg.norm(out_flat - ref_flat)) / norm if ref_flat.size else None
    kls, agree = [], []
    for r, o in zip(reference, outputs, strict=True):
        p, q = _classifier_probs(r), _classifier_probs(o)
        if p is None or q is None:
            continue
        p, q = np.clip(p, 1e-12, 1), np.clip(q, 1e-12, 1)
        kls.append(float(np.mean(np.sum(p * (np.log(p) - np.log(q)), axis=1))))
        agree.append(float(np.mean(p.argmax(axis=1) == q.argmax(axis=1))))
    return {"rel_l2": rel, "kl": float(np.mean(kls)) if kls else None,
            "top1_agreement": float(np.mean(agree)) if agree else None}


def loss_profile(model_or_path: Any, inputs: dict[str, Any] | None = None, levels: Any = DEFAULT_LEVELS,
                 backend: Any = "cpu", threads: int | None = None, *, layers: list[str] | None = None,
                 time_budget: float | None = None, name: str | None = None, timing: bool = True,
                 progress: Any = None) -> LossProfile:
    """Sparsify's loss profile of a model (a Model, path, bytes or ModelProto): for every prunable layer and
    every sparsity in ``levels``, that layer alone magnitude-pruned, and how the outputs move on ``inputs``
    (seeded random ones when None, and the profile says so). The metrics run on the CPU oracle; with
    ``timing``, each layer's dense time on ``backend`` is measured too (a short ``profile``), so the profile
    says what each level could save there. ``layers``: only these (names); ``time_budget``: seconds after
    which the remaining layers are left unprofiled (``complete`` false). ``progress(phase, done, total)``."""
    kind = backend_of(backend)
    try:
        levels = sorted({float(s) for s in levels})
    except (TypeError, ValueError):
        raise InputError(f"loss_profile(levels={levels!r}): give sparsity levels as numbers in [0, 1)") from None
    if not levels or any(not 0 <= s < 1 for s in levels):
        raise InputError(f"loss_profile(levels={levels!r}): each level must lie in [0, 1)")
    if time_budget is not None and not (isinstance(time_budget, int | float) and time_budget > 0):
        raise InputError(f"loss_profile(time_budget={time_budget!r}): give seconds > 0, or None")
    model = model_of(model_or_path, name)
    feeds = dict(inputs) if inputs is not None else sample_inputs(model)
    with Worker(model, "cpu", threads=threads) as check:  # validates inputs and threads, names what is wrong
        feeds = check.validate(feeds)
        used_threads = check.threads
    graph = copy.copy(model.graph)
    graph.constants = dict(model.graph.constants)
    consts = graph.constants
    candidates = [(i, layer, w) for i, layer in enumerate(graph.layers) if (w := prunable_weight(layer, consts))]
    if layers is not None:
        wanted = list(layers)
        known = {layer.name for _i, layer, _w in candidates}
        unknown = [n for n in wanted if n not in known]
        if unknown:
            all_names = {layer.name for layer in graph.layers}
            what = ", ".join(f"{n!r} ({'not a layer' if n not in all_names else 'no constant weight to prune'})"
                             for n in unknown)
            raise InputError(f"loss_profile(layers=...): {what}; prunable layers of '{model.name}': {sorted(known)}")
        candidates = [c for c in candidates if c[1].name in set(wanted)]
    shapes, sizes = tensor_facts(model, feeds, used_threads)
    costs = {c.index: c for c in layer_costs(model, shapes, sizes)}
    times: dict[str, float] = {}
    if timing:
        prof = profile(model, backend=kind, threads=threads, runs=3, warmup=1, inputs=feeds, pruning_layers=0,
                       measure_ceilings=False)
        times = {e["name"]: e["time_ms"] for e in prof["layers"] if e.get("time_ms") is not None}
    program = GraphProgram(graph, used_threads, branch_parallel=False)
    started = time.perf_counter()
    entries: list[dict[str, Any]] = []
    profiled = 0
    try:
        reference = list(program.run(feeds))
        norm = float(np.linalg.norm(flat_outputs(reference))) or 1.0
        for k, (i, layer, weight) in enumerate(candidates):
            cost = costs[i]
            entry: dict[str, Any] = {"name": layer.name, "op_type": layer.op_type, "weight_names": cost.weight_names,
                                     "pruned_weight": weight, "params": cost.params, "flops": cost.flops,
                                     "time_ms": times.get(layer.name), "sensitivity": None, "levels": []}
            entries.append(entry)
            if time_budget is not None and time.perf_counter() - started > time_budget:
                entry["skipped"] = "time budget"
                continue
            original = consts[weight]
            try:
                for s in levels:
                    consts[weight] = prune(original, s)
                    entry["levels"].append({"sparsity": s, **_metrics(reference, list(program.run(feeds)),
                                                                      norm)})
            finally:
                consts[weight] = original
            rels = [lv["rel_l2"] for lv in entry["levels"] if lv["rel_l2"] is not None]
            entry["sensitivity"] = float(np.mean(rels)) if rels else None
            profiled += 1
            if progress is not None:
                progress("loss", k + 1, len(candidates))
    finally:
        program.close()
    data = {"format": LOSS_FORMAT, "name": name or model.name, "model": model.source or model.name,
            "backend": kind.value, "threads": used_threads, "levels": levels,
            "inputs": "user" if inputs is not None else "random",
            "input_shapes": {n: list(np.asarray(v).shape) for n, v in feeds.items() if not isinstance(v, list)},
            "metrics": list(METRICS), "metric_notes": METRICS,
            "sensitivity": "mean rel_l2 over the profiled levels",
            "complete": profiled == len(candidates), "profiled_layers": profiled,
            "seconds": round(time.perf_counter() - started, 3), "layers": entries}
    return LossProfile(data)
