"""Structured pruning: remove whole output channels (the filters of lowest L2 norm) and follow each channel to
every reader.

The tracer walks the graph forward: BatchNormalization parameters, elementwise ops and their per-channel
constants, pools, depthwise convs, Concat (offsets), Flatten/Reshape into Gemm/MatMul (the channel's block of
columns) and the readers' weights. Tensors joined elementwise (residual Add, Sum, SE Mul) must keep the *same*
channels, so their producers form one group that drops one channel set, chosen by the members' summed
normalized norms. Whatever cannot be traced safely (a graph output, Shape, Slice, a reshape that mixes
channels, a grouped conv, a subgraph capture, an unknown op) leaves the producers it reaches dense, so the
written model always has the original graph outputs' shapes. ``prune_channels`` applies what it found.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto, NodeProto, helper

from wgsentis.ops.reduce_spec import softmax_axis
from wgsentis.ops.spec import spec_of
from wgsentis.profiler.prune_constants import Constants, captured_names, default_opset
from wgsentis.profiler.prune_result import LayerPruning

# Each op's channel rule is a facet of its spec (``wgsentis.ops.spec.CHANNEL_RULES``), declared by its family.


def _rule(node: NodeProto) -> str | None:
    """The node's channel rule (None: pruning stops at it), by op type as the tracer has always read it."""
    return spec_of(node.op_type).channel_rule


@dataclass(frozen=True)
class Chan:
    """Where a tensor's channels are: along ``axis`` of a ``rank``-D tensor, each channel ``block``
    consecutive entries, in segments of (space id, channels) laid end to end."""

    rank: int
    axis: int
    block: int
    segs: tuple[tuple[int, int], ...]

    @property
    def size(self) -> int:
        return sum(n for _, n in self.segs) * self.block


@dataclass
class Space:
    """One channel set: a producer's output channels (or a fixed set: graph input, untraced producer)."""

    size: int
    node: int | None = None  # the producing node (None: not prunable)
    weight_dim: int = 0


class Tracer:
    """Forward pass over the graph building channel spaces, groups (union-find) and the edits to make."""

    def __init__(self, proto: ModelProto, consts: Constants, levels: dict[str, float], names: list[str]) -> None:
        self.proto, self.consts, self.names = proto, consts, names
        self.levels = levels
        self.spaces: list[Space] = []
        self.parent: list[int] = []
        self.frozen: dict[int, str] = {}  # root -> why its channels must all stay
        self.chan: dict[str, Chan] = {}
        self.slices: list[tuple[int, int, int, Chan]] = []  # (node, input index, dim, chan of that dim)
        self.groups_attr: list[tuple[int, Chan]] = []  # depthwise convs: group = channels kept
        self.reshapes: list[tuple[int, int, Chan]] = []  # (node, output axis, chan out)
        self.shapes = self._shapes()

    def _shapes(self) -> dict[str, list[Any]]:
        try:
            inferred = onnx.shape_inference.infer_shapes(self.proto, data_prop=True)
        except Exception:  # shapes are a help: without them fewer channels can be traced, nothing breaks
            inferred = self.proto
        g = inferred.graph
        out: dict[str, list[Any]] = {}
        for vi in [*g.input, *g.value_info, *g.output]:
            t = vi.type.tensor_type
            if vi.type.HasField("tensor_type") and t.HasField("shape"):
                out[vi.name] = [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
                                for d in t.shape.dim]
        for name, v in self.consts.values.items():
            out.setdefault(name, list(v.shape))
        return out

    def shape(self, name: str) -> list[Any] | None:
        v = self.consts.get(name)
        return list(v.shape) if v is not None else self.shapes.get(name)

    # union-find over spaces
    def new_space(self, size: int, node: int | None = None, dim: int = 0, frozen: str | None = None) -> int:
        self.spaces.append(Space(size, node, dim))
        self.parent.append(len(self.parent))
        if frozen:
            self.frozen[len(self.parent) - 1] = frozen
        return len(self.parent) - 1

    def root(self, s: int) -> int:
        while self.parent[s] != s:
            self.parent[s] = self.parent[self.parent[s]]
            s = self.parent[s]
        return s

    def freeze(self, chan: Chan | None, why: str) -> None:
        if chan is None:
            return
        for s, _ in chan.segs:
            self.frozen.setdefault(self.root(s), why)

    def union(self, a: int, b: int) -> None:
        ra, rb = self.root(a), self.root(b)
        if ra == rb:
            return
        self.parent[rb] = ra
        if rb in self.frozen:
            self.frozen.setdefault(ra, self.frozen.pop(rb))
        if self.spaces[ra].size != self.spaces[rb].size:
            self.frozen.setdefault(ra, "joined elementwise with a tensor of another channel count")

    def output_chan(self, node: NodeProto, chan: Chan) -> None:
        for o in node.output:
            if o:
                self.chan[o] = chan

    # the pass
    def run(self) -> None:
        graph = self.proto.graph
        init_names = set(self.consts.inits)
        for vi in graph.input:
            if vi.name in init_names:
                continue
            shape = self.shapes.get(vi.name)
            if shape and len(shape) >= 2 and isinstance(shape[1], int) and shape[1] > 0:
                self.chan[vi.name] = Chan(len(shape), 1, 1, ((self.new_space(shape[1], frozen="graph input"),
                                                              shape[1]),))
        for i, node in enumerate(graph.node):
            ins = [n for n in [*node.input, *captured_names(node)] if n in self.chan]
            if not ins and not self._is_producer(node):
                continue
            marks = (len(self.slices), len(self.groups_attr), len(self.reshapes), len(self.spaces))
            try:
                ok = self.visit(i, node)
            except (ValueError, IndexError, KeyError, TypeError, ZeroDivisionError):
                ok = False  # an unusual attribute or shape: treat like an op we do not know
            if not ok:  # undo what the visit recorded before it gave up, and keep what it reached dense
                del self.slices[marks[0]:], self.groups_attr[marks[1]:], self.reshapes[marks[2]:]
                why = f"reaches {node.op_type} '{self.names[i]}', which cannot follow removed channels"
                for s in range(marks[3], len(self.spaces)):
                    self.frozen.setdefault(self.root(s), why)
                for n in ins:
                    self.freeze(self.chan[n], why)
                for o in node.output:
                    self.chan.pop(o, None)
            if captured_names(node) & set(self.chan):
                for n in captured_names(node) & set(self.chan):
                    self.freeze(self.chan[n], f"read inside a subgraph of '{self.names[i]}'")
        for out in graph.output:
            if out.name in self.chan:
                self.freeze(self.chan[out.name], "reaches a graph output, whose shape must stay")

    def _is_producer(self, node: NodeProto) -> bool:
        """A Conv, Gemm or MatMul with a constant weight: it may start a channel space."""
        return _rule(node) == "weighted" and len(node.input) > 1 \
            and self.consts.get(node.input[1]) is not None

    def visit(self, i: int, node: NodeProto) -> bool:
        rule = _rule(node)
        attrs = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        x = self.chan.get(node.input[0]) if node.input else None
        if rule == "weighted":
            return self._weighted(i, node, attrs, x)
        if rule == "per_channel":
            if x is None or x.axis != 1 or x.block != 1 or any(n in self.chan for n in node.input[1:]):
                return False
            if len([o for o in node.output if o]) > 1:
                return False  # training-mode outputs
            for k in range(1, len(node.input)):
                v = self.consts.get(node.input[k])
                if v is None or v.shape != (x.size,):
                    return False
                self.slices.append((i, k, 0, x))
            self.output_chan(node, x)
            return True
        if rule == "elementwise":
            if x is None or any(n in self.chan for n in node.input[1:]):
                return False
            self.output_chan(node, x)
            return True
        if rule == "broadcast":
            return self._broadcast(i, node)
        if rule == "pool":
            if x is None or x.axis != 1 or x.block != 1 or (len(node.output) > 1 and node.output[1]):
                return False
            self.output_chan(node, Chan(x.rank, 1, 1, x.segs))
            return True
        if rule == "concat":
            return self._concat(node, attrs)
        if rule == "relayout":
            return self._relayout(i, node, x)
        if rule == "transpose":
            if x is None:
                return False
            perm = attrs.get("perm") or list(reversed(range(x.rank)))
            self.output_chan(node, Chan(x.rank, list(perm).index(x.axis), x.block, x.segs))
            return True
        if rule == "softmax":
            if x is None:
                return False
            found = softmax_axis(default_opset(self.proto), attrs.get("axis"), x.rank)
            if found is None:
                return False
            axis, flattened = found
            if (x.axis >= axis) if flattened else (x.axis == axis):
                return False  # normalizes across the channels
            self.output_chan(node, x)
            return True
        if rule == "reduce":
            return self._reduce(node, attrs, x)
        if rule == "pad":
            return self._pad(node, attrs, x)
        if rule == "resize":
            return self._resize(node, attrs, x)
        return False

    def _weighted(self, i: int, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        op = node.op_type
        w = self.consts.get(node.input[1]) if len(node.input) > 1 else None
        if any(n in self.chan for n in node.input[1:]) or w is None:
            return False
        if op == "Conv":
            group = attrs.get("group", 1)
            if group != 1:  # depthwise (one filter per channel) follows its input's channels; others cannot
                if x is None or x.axis != 1 or x.block != 1 or not (group == x.size == w.shape[0]
                                                                      and w.shape[1] == 1):
                    return False
                self.slices.append((i, 1, 0, x))
                if len(node.input) > 2 and node.input[2]:
                    self.slices.append((i, 2, 0, x))
                self.groups_attr.append((i, x))
                self.output_chan(node, x)
                return True
            if x is not None:
                if x.axis != 1 or x.block != 1 or w.shape[1] != x.size:
                    return False
                self.slices.append((i, 1, 1, x))
            rank = x.rank if x is not None else len(self.shape(node.input[0]) or [0] * w.ndim)
            out = self.new_space(w.shape[0], i, 0)
            chan = Chan(rank, 1, 1, ((out, w.shape[0]),))
            self.slices.append((i, 1, 0, chan))
            if len(node.input) > 2 and node.input[2]:
                self.slices.append((i, 2, 0, chan))
            self.output_chan(node, chan)
            return True
        if w.ndim != 2 or w.dtype.kind != "f":
            return False
        if op == "Gemm":
            if attrs.get("transA", 0) and x is not None:
                return False
            in_dim, out_dim = (1, 0) if attrs.get("transB", 0) else (0, 1)
            if x is not None:
                if x.rank != 2 or x.axis != 1 or x.size != w.shape[in_dim]:
                    return False
                self.slices.append((i, 1, in_dim, x))
            chan = Chan(2, 1, 1, ((self.new_space(w.shape[out_dim], i, out_dim), w.shape[out_dim]),))
            self.slices.append((i, 1, out_dim, chan))
            if len(node.input) > 2 and node.input[2]:
                if not self._const_operand(i, 2, chan):
                    return False
            self.output_chan(node, chan)
            return True
        # MatMul x @ W
        if x is not None:
            if x.axis != x.rank - 1 or x.size != w.shape[0]:
                return False
            self.slices.append((i, 1, 0, x))
        rank = x.rank if x is not None else len(self.shape(node.input[0]) or [])
        if rank < 2:
            return False
        chan = Chan(rank, rank - 1, 1, ((self.new_space(w.shape[1], i, 1), w.shape[1]),))
        self.slices.append((i, 1, 1, chan))
        self.output_chan(node, chan)
        return True

    def _const_operand(self, i: int, k: int, chan: Chan, out_rank: int | None = None) -> bool:
        """A constant operand broadcast against ``chan``: sliced along the channel axis where it has one."""
        v = self.consts.get(self.proto.graph.node[i].input[k])
        if v is None:
            return False
        rank = out_rank if out_rank is not None else chan.rank
        pos = chan.axis - (rank - v.ndim)
        if pos < 0 or v.shape[pos] == 1:
            return True
        if v.shape[pos] != chan.size:
            return False
        self.slices.append((i, k, pos, chan))
        return True

    def _broadcast(self, i: int, node: NodeProto) -> bool:
        tracked = [(k, self.chan[n]) for k, n in enumerate(node.input) if n in self.chan]
        shapes = [self.shape(n) for n in node.input]
        if any(s is None for s in shapes):
            return False
        rank = max(len(s) for s in shapes)
        axis = {c.axis + rank - c.rank for _, c in tracked}
        blocks = {c.block for _, c in tracked}
        sizes = {c.size for _, c in tracked}
        if len(axis) != 1 or len(blocks) != 1 or len(sizes) != 1:
            return False
        first = tracked[0][1]
        out = Chan(rank, axis.pop(), first.block, first.segs)
        for _, c in tracked[1:]:  # joined elementwise: the same channels must go on both sides
            if [n for _, n in c.segs] != [n for _, n in first.segs]:
                return False
            for (a, _), (b, _) in zip(first.segs, c.segs, strict=True):
                self.union(a, b)
        for k, n in enumerate(node.input):
            if n in self.chan or not n:
                continue
            if self.consts.get(n) is not None:
                if not self._const_operand(i, k, out, rank):
                    return False
                continue
            pos = out.axis - (rank - len(shapes[k]))
            if pos >= 0 and shapes[k][pos] != 1:
                return False  # a computed operand with channels we cannot slice
        self.output_chan(node, out)
        return True

    def _concat(self, node: NodeProto, attrs: dict[str, Any]) -> bool:
        shapes = [self.shape(n) for n in node.input]
        if any(s is None for s in shapes):
            return False
        rank = len(shapes[0])
        axis = attrs.get("axis", 1) % rank
        segs: list[tuple[int, int]] = []
        block = None
        for n, s in zip(node.input, shapes, strict=True):
            c = self.chan.get(n)
            if c is None:
                if not isinstance(s[axis], int) or s[axis] <= 0:
                    return False
                segs.append((self.new_space(s[axis], frozen="concatenated with an untraced tensor"), s[axis]))
                b = 1
            else:
                if c.axis != axis or c.rank != rank:
                    return False
                segs += list(c.segs)
                b = c.block
            if block is not None and b != block:
                return False
            block = b
        self.output_chan(node, Chan(rank, axis, block or 1, tuple(segs)))
        return True

    def _relayout(self, i: int, node: NodeProto, x: Chan | None) -> bool:
        """Reshape/Flatten/Squeeze/Unsqueeze that keep each channel's entries together along one output axis."""
        if x is None or any(n in self.chan for n in node.input[1:]):
            return False
        src, dst = self.shape(node.input[0]), self.shapes.get(node.output[0])
        if src is None or dst is None:
            return False
        run = x.block * _prod(src[x.axis + 1:])
        if run is None:
            return False
        for a in range(len(dst)):
            if not _same_prefix(src[:x.axis], dst[:a]):
                continue
            tail = _prod(dst[a + 1:])
            if tail and run % tail == 0 and dst[a] == x.size // x.block * (run // tail):
                chan = Chan(len(dst), a, run // tail, x.segs)
                if node.op_type == "Reshape":
                    shape = self.consts.get(node.input[1])
                    if shape is None or len(shape) != len(dst):
                        return False
                    self.reshapes.append((i, a, chan))
                self.output_chan(node, chan)
                return True
        return False

    def _reduce(self, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        if x is None:
            return False
        axes = attrs.get("axes")
        if axes is None and len(node.input) > 1 and node.input[1]:
            v = self.consts.get(node.input[1])
            axes = None if v is None else [int(a) for a in v.reshape(-1)]
        if not axes:
            return False
        axes = [a % x.rank for a in axes]
        if x.axis in axes:
            return False
        keep = attrs.get("keepdims", 1)
        axis = x.axis if keep else x.axis - sum(a < x.axis for a in axes)
        self.output_chan(node, Chan(x.rank if keep else x.rank - len(axes), axis, x.block, x.segs))
        return True

    def _pad(self, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        if x is None or any(n in self.chan for n in node.input[1:]) or (len(node.input) > 3 and node.input[3]):
            return False
        pads = attrs.get("pads")
        if pads is None:
            v = self.consts.get(node.input[1]) if len(node.input) > 1 else None
            pads = None if v is None else [int(p) for p in v.reshape(-1)]
        if pads is None or pads[x.axis] or pads[x.axis + x.rank]:
            return False
        self.output_chan(node, x)
        return True

    def _resize(self, node: NodeProto, attrs: dict[str, Any], x: Chan | None) -> bool:
        if x is None or x.block != 1 or any(n in self.chan for n in node.input[1:]):
            return False
        if node.op_type == "Resize" and len(node.input) > 3 and node.input[3]:
            return False  # sizes would name the channel count
        scales = attrs.get("scales")
        if scales is None:
            k = 1 if node.op_type == "Upsample" or default_opset(self.proto) < 11 else 2
            v = self.consts.get(node.input[k]) if len(node.input) > k else None
            scales = None if v is None else [float(s) for s in v.reshape(-1)]
        if not scales or len(scales) != x.rank or scales[x.axis] != 1.0:
            return False
        self.output_chan(node, x)
        return True


def _prod(dims: list[Any]) -> int | None:
    out = 1
    for d in dims:
        if not isinstance(d, int) or d <= 0:
            return None
        out *= d
    return out


def _same_prefix(a: list[Any], b: list[Any]) -> bool:
    if a == b and all(d is not None for d in a):
        return True
    pa, pb = _prod(a), _prod(b)
    return pa is not None and pa == pb


def prune_channels(proto: ModelProto, consts: Constants, levels: dict[str, float], names: list[str],
                   prunable: dict[str, tuple[int, str]], report: dict[str, LayerPruning]) -> None:
    """Trace the channels, keep each group's strongest channels at its level, cut the constants, depthwise
    group counts and Reshape targets to them, and fill each prunable layer's report entry."""
    tracer = Tracer(proto, consts, levels, names)
    tracer.run()
    nodes = proto.graph.node
    # Members of each group; the group's level is its least member's (a layer kept dense keeps its group).
    members: dict[int, list[int]] = {}
    for s, space in enumerate(tracer.spaces):
        if space.node is not None:
            members.setdefault(tracer.root(s), []).append(s)
    kept: dict[int, np.ndarray] = {}
    for root, group in members.items():
        level = min(levels.get(names[tracer.spaces[s].node], 0.0) for s in group)
        size = tracer.spaces[root].size
        drop = min(round(level * size), size - 1)
        if root in tracer.frozen or drop <= 0:
            continue
        score = np.zeros(size)
        for s in group:  # summed normalized L2 norms of the members' filters
            sp = tracer.spaces[s]
            w = consts.get(nodes[sp.node].input[1]).astype(np.float64)
            axes = tuple(d for d in range(w.ndim) if d != sp.weight_dim)
            norms = np.sqrt((w * w).sum(axis=axes))
            score += norms / (norms.mean() or 1.0)
        keep = np.sort(np.argsort(score, kind="stable")[drop:])
        for s in [s for s in range(len(tracer.spaces)) if tracer.root(s) == root]:
            kept[s] = keep

    def index(chan: Chan) -> np.ndarray | None:
        if not any(s in kept for s, _ in chan.segs):
            return None
        parts, offset = [], 0
        for s, n in chan.segs:
            ch = kept.get(s, np.arange(n))
            parts.append(((offset + ch)[:, None] * chan.block + np.arange(chan.block)[None, :]).reshape(-1))
            offset += n
        return np.concatenate(parts)

    edits: dict[tuple[int, int], list[tuple[int, np.ndarray]]] = {}
    for i, k, dim, chan in tracer.slices:
        idx = index(chan)
        if idx is not None:
            edits.setdefault((i, k), []).append((dim, idx))
    for (i, k), cuts in edits.items():
        value = consts.get(nodes[i].input[k])
        for dim, idx in cuts:
            value = np.take(value, idx, axis=dim)
        consts.write(nodes[i], k, value)
    for i, chan in tracer.groups_attr:
        idx = index(chan)
        if idx is not None:
            for a in nodes[i].attribute:
                if a.name == "group":
                    a.i = len(idx)
    for i, axis, chan in tracer.reshapes:
        idx = index(chan)
        shape = consts.get(nodes[i].input[1])
        if idx is not None and shape[axis] != -1:
            shape = shape.copy()
            shape[axis] = len(idx)
            consts.write(nodes[i], 1, shape)
    by_node = {s.node: s for s in tracer.spaces if s.node is not None}
    for name, (i, _) in prunable.items():
        entry = report[name]
        space = next((s for s, sp in enumerate(tracer.spaces) if sp.node == i), None)
        if space is None:
            group = next((a.i for a in nodes[i].attribute if a.name == "group"), 1)
            depthwise = next((c for j, c in tracer.groups_attr if j == i), None)
            if depthwise is not None:
                idx = index(depthwise)
                entry.channels = depthwise.size
                entry.kept_indices = list(range(depthwise.size)) if idx is None else [int(c) for c in idx]
                entry.kept_channels = len(entry.kept_indices)
                if entry.level > 0 and idx is None:
                    entry.dense_reason = "its output channels follow its input's (depthwise), which stay"
            elif entry.level > 0:
                entry.dense_reason = (f"a grouped convolution (group={group})" if group > 1 else
                                      f"its {nodes[i].op_type} output channels could not be traced")
            continue
        entry.channels = by_node[i].size
        entry.kept_channels = len(kept[space]) if space in kept else entry.channels
        entry.kept_indices = [int(c) for c in kept[space]] if space in kept else list(range(entry.channels))
        if entry.level > 0 and space not in kept:
            root = tracer.root(space)
            entry.dense_reason = tracer.frozen.get(root) or "a layer joined elementwise with it is kept dense"
