"""The one place WGSL text is assembled for the gpu-pixel programs (issue 30): builders name .wgsl files and
choose among a small fixed set of variants; this module fills the files' ``{{NAME}}`` placeholders and joins
what a draw's structure calls for (one texture binding and accessor per input, from the templates in
wgsl/pixel/gen/; the loop nest and combining functions of a reduction). Sizes never enter the text: they are
uniform words, so a program's source depends only on its structure (input count, texel kinds, ranks, variants),
and one pipeline serves every size.

``snippet`` reads a body, helper or expression file (``pixel/body/*.wgsl``, ``pixel/expr/*.wgsl``); it passes
WGSL text through unchanged for the builders that still write their bodies in Python.

The sections at the end do the same for the gpu-compute programs (the variant files of wgsl/compute/gen/: matmul
loaders and stores, binary4 loaders, the Winograd V binding), for gpu-pixel's matmul, conv, rnn and Resize
programs (their per-render-target statements, the Winograd transforms' sums, Resize's tap loops) and hold the
elementwise ops' expression tables both GPU backends read.
"""

from __future__ import annotations

from collections.abc import Sequence

from wgsentis.backends.gpu.device import wgsl_source

GEN = "pixel/gen"  # the declaration templates


def is_file(source: str) -> bool:
    """Whether ``source`` names a .wgsl file (a path under wgsl/) rather than being WGSL text."""
    return source.endswith(".wgsl") and "\n" not in source and " " not in source


def snippet(source: str, subs: dict[str, str] | None = None) -> str:
    """The WGSL of a body, helper or expression: the file ``wgsl/<source>`` with ``subs`` filled in (its trailing
    newline dropped, so that an expression file reads as an expression), or ``source`` itself when it is text."""
    if not source or not is_file(source):
        return source
    return wgsl_source(source, subs).rstrip()


def expression(source: str) -> str:
    """An expression file's WGSL (``wgsl/<source>``) on its own: its ``//`` comment lines dropped, so that it can
    stand inside a statement or another expression (activations, folded into many programs' epilogues)."""
    return " ".join(line for line in wgsl_source(source).splitlines() if line.strip() and
                    not line.lstrip().startswith("//"))


def _fill(template: str, **subs: int | str) -> str:
    return wgsl_source(f"{GEN}/{template}.wgsl", {name: str(value) for name, value in subs.items()}).rstrip()


# -- the generic pixel programs' declarations (map.wgsl, map4.wgsl, texels.wgsl, same4.wgsl) -----------------------
def texel_inputs(kinds: Sequence[str]) -> str:
    """same4.wgsl's declarations: each input's texture and accessor ``xk(texel)``, then the parameter block."""
    decls = [_fill("input_texel", K=k, KIND=kind) for k, kind in enumerate(kinds)]
    return "\n".join([*decls, _fill("uniform", K=len(kinds))])


def addressed_inputs(kinds: Sequence[str], form: str | Sequence[str], *, faults: bool = False,
                     by_index: bool = False) -> str:
    """An addressed program's declarations: input k's texture and accessor ``xk(c)`` (its addressing words from
    14 * (k + 1)) in ``form`` (per input, or one for all): "element" (its element at c), "whole" (the texel
    holding c) or "splat" (c's element over four lanes); then the parameter block and, with ``faults``, the
    index fault buffer. ``by_index``: also ``x_at(k, c)``, input k's element (the inputs share one kind)."""
    forms = [form] * len(kinds) if isinstance(form, str) else list(form)
    decls = [_fill(f"input_{how}", K=k, KIND=kind, BASE=14 * (k + 1))
             for k, (kind, how) in enumerate(zip(kinds, forms, strict=True))]
    if by_index:
        if len(set(kinds)) != 1 or any(how != "element" for how in forms):
            raise ValueError("x_at needs element accessors of one texel kind")
        cases = "\n".join(_fill("input_at_case", K=k) for k in range(len(kinds)))
        decls.append(_fill("input_at", KIND=kinds[0], CASES=cases))
    decls.append(_fill("uniform", K=len(kinds)))
    if faults:
        decls.append(_fill("faults", K=len(kinds) + 1))
    return "\n".join(decls)


def lane_statements(count: int, lane: str, at: str) -> dict[str, str]:
    """The LOADS and LANE of map4.wgsl / same4.wgsl: the inputs' texels ``va``, ``vb``, ... loaded at ``at``, and
    the lane's scalars ``a``, ``b``, ... before the ``lane`` statements."""
    names = "abcdefgh"
    loads = "\n    ".join(f"let v{names[k]} = x{k}({at});" for k in range(count))
    scalars = " ".join(f"let {names[k]} = v{names[k]}[lane];" for k in range(count))
    return {"LOADS": loads, "LANE": f"{scalars} {lane}"}


def element_statements(count: int, lane: str) -> str:
    """A map.wgsl body computing ``lane`` from the scalars ``a``, ``b``, ... (the inputs' elements at c)."""
    names = "abcdefgh"
    return " ".join(f"let {names[k]} = x{k}(c);" for k in range(count)) + " " + lane


# -- small shared helpers ------------------------------------------------------------------------------------------
def div4(division_function: str) -> str:
    """``div4(a, b)``: vec4 division with the device's exact float division (math.wgsl's ``division_function``)."""
    return snippet("pixel/div4.wgsl", {"DIV": division_function})


def with_division(expr: str, division_function: str) -> str:
    """An activation's expression (ops/activations.py) with its ``div_f32(a, b)`` calls made the device's exact
    float division (math.wgsl's ``division_function``)."""
    return expr.replace("div_f32(", f"{division_function}(opaque_zero(), ")


def activation4(expr: str, division_function: str) -> str:
    """``act4(v)``: a fused activation (``expr`` of ``v`` with alpha, beta, gamma from pef(0..2)) lane by lane."""
    return snippet("pixel/act4.wgsl", {"ACT": with_division(expr, division_function)})


def kind_functions(program: str, kind: str, subs: dict[str, str] | None = None) -> str:
    """A program's texel-kind functions: ``wgsl/pixel/<program>_<kind>.wgsl`` (one file per kind, so that an
    integer program never meets a float-only builtin)."""
    return snippet(f"pixel/{program}_{kind}.wgsl", subs)


def pool_subs(kind: str, division_function: str) -> dict[str, str]:
    """pixel/pool.wgsl's and pool_indices.wgsl's substitutions for texels of ``kind``: its type, the kind's
    functions (pixel/pool_<kind>.wgsl) and common/pool_columns.wgsl's accumulator type."""
    return {"T": kind, "KIND": kind_functions("pool", kind, {"DIV": division_function}), "POOL_T": f"vec4<{kind}>"}


# -- reduce.wgsl ---------------------------------------------------------------------------------------------------
CENTER = 100  # the params word where reduce.wgsl's center tensor's addressing begins
GROUP_WORDS = 28  # ... and where its reduced groups begin
# reduce.wgsl's PRE and POST override values (the kind files, pixel/reduce_<kind>.wgsl, hold the functions)
PRE_OPS = {"": 0, "abs": 1, "sq": 2, "pow": 3, "exp": 4}
POST_OPS = {"": 0, "scale": 1, "sqrt": 2, "log": 3, "root": 4, "invstd": 5}


def reduce_subs(op: str, pre: str, post: str, kind: str, lanes: int, texel_form: bool, ngroups: int,
                blocked: int | None, split: bool, centered: bool) -> tuple[dict[str, str], dict[str, int | float]]:
    """reduce.wgsl's substitutions and override constants for a reduction of structure: ``op`` (sum, prod, max,
    min, lse) of ``pre`` of each element then ``post`` (PRE_OPS, POST_OPS: override constants of the kind's
    functions, pixel/reduce_<kind>.wgsl); ``lanes`` accumulators (1 in the texel form, 4 in the blocked form); a
    nest of ``ngroups`` loops over the reduced groups (``blocked``: the group of the blocked axis, masked);
    ``split``: the first stage of a split reduction; ``centered``: a center tensor is bound. Every size is a
    parameter word."""
    body = _reduce_body(op, kind, lanes, texel_form, ngroups, blocked, split, centered)
    bindings = [_fill("center")] if centered else []
    bindings.append(_fill("uniform", K=2 if centered else 1))
    subs = {"T": kind, "BINDINGS": "\n".join(bindings), "FUNCS": kind_functions("reduce", kind), "BODY": body,
            "BLOCK_COORD": "cc.c[axis] = cc.c[axis] / 4u;" if texel_form else ""}
    return subs, {"PRE": PRE_OPS[pre], "POST": POST_OPS[post]}


def _reduce_body(op: str, kind: str, lanes: int, texel_form: bool, ngroups: int, blocked: int | None, split: bool,
                 centered: bool) -> str:
    """reduce.wgsl's fragment body: the lanes' base texels, the center's values, the sweeps' loop nests."""
    lines = []
    if lanes == 4:  # the output's lanes along a kept axis: each its own base texel (an invalid one repeats lane 0)
        lines.append("let ls = pu(14u + axis);")
        lines += [f"let b{j} = b0 + select(0u, {j}u * ls, valid[{j}]);" for j in range(1, 4)]
    if centered:
        if texel_form:
            lines.append(f"let cen0 = textureLoad(C, locate({CENTER}u, c).xy, 0);")
        else:
            for j in range(lanes):
                lines.append(f"var c{j} = c;")
                lines.append(f"c{j}.c[axis] = min(c.c[axis] + {j}u, dim_of(0u, axis) - 1u);")
                lines.append(f"let at{j} = locate({CENTER}u, c{j});")
                lines.append(f"let cen{j} = splat(textureLoad(C, at{j}.xy, 0)[at{j}.z]);")
    if split:
        lines.append("let k0lo = c.c[pu(20u)] * pu(21u);")
        lines.append(f"let k0hi = min(pu({GROUP_WORDS}u), k0lo + pu(21u));")

    def sweep(acc: str, op: str) -> None:
        """A loop nest folding pre(element) into accumulators ``acc``j with cmb_``op``."""
        lines.extend(f"var {acc}{j} = identity_{op}();" for j in range(lanes))
        inner = []
        for j in range(lanes):
            v = f"load(b{j} + o) - cen{j}" if centered else f"load(b{j} + o)"
            expr = f"pre({v})"
            if blocked is not None:  # padding lanes of the last block count as the identity
                expr = f"select(identity_{op}(), {expr}, m)"
            inner.append(f"{acc}{j} = cmb_{op}({acc}{j}, {expr});")
        lines.extend(_nest(ngroups, blocked, split, inner))

    if op == "lse":
        sweep("mx", "max")
        for j in range(lanes):
            peak = "mx0" if texel_form else f"splat(hz_max(mx{j}))"
            lines.append(f"let pk{j} = finite_or_zero({peak});")
        # the second sweep: the sum of exp(x - peak), padding lanes adding 0
        lines.extend(f"var acc{j} = identity_sum();" for j in range(lanes))
        inner = []
        for j in range(lanes):
            expr = f"exp4(load(b{j} + o) - pk{j})"
            if blocked is not None:
                expr = f"select(identity_sum(), {expr}, m)"
            inner.append(f"acc{j} = acc{j} + {expr};")
        lines.extend(_nest(ngroups, blocked, split, inner))
        if texel_form:
            lines.append("let r = log(acc0) + pk0;")
        else:
            sums = ", ".join(f"hz_sum(acc{j})" if j < lanes else "1.0" for j in range(4))
            peaks = ", ".join(f"pk{j}.x" if j < lanes else "0.0" for j in range(4))
            lines.append(f"let r = log(vec4<f32>({sums})) + vec4<f32>({peaks});")
    else:
        sweep("acc", op)
        if texel_form:
            lines.append("let r = post(acc0);")
        else:
            vals = ", ".join(f"hz_{op}(acc{j})" if j < lanes else f"{kind}(0)" for j in range(4))
            lines.append(f"let r = post(vec4<{kind}>({vals}));")
    return "\n    ".join(lines)


def _nest(ngroups: int, blocked: int | None, split: bool, inner: list[str]) -> list[str]:
    """The loop nest over the reduced groups (params from GROUP_WORDS), outermost first, running ``inner`` with
    ``o`` the texel offset from each lane's base and ``m`` the lane mask of the blocked group."""
    lines, prev = [], ""
    if ngroups == 0:
        return ["{", "let o = 0u;", *inner, "}"]
    for g in range(ngroups):
        n, s = f"pu({GROUP_WORDS + 2 * g}u)", f"pu({GROUP_WORDS + 2 * g + 1}u)"
        lo, hi = ("k0lo", "k0hi") if g == 0 and split else ("0u", n)
        lines.append(f"for (var k{g} = {lo}; k{g} < {hi}; k{g}++) {{")
        lines.append(f"let o{g} = {prev + ' + ' if prev else ''}k{g} * {s};")
        if g == blocked:
            lines.append(f"let m = lane_mask(select(4u, pu(23u), k{g} + 1u == {n}));")
        prev = f"o{g}"
    lines.append(f"let o = {prev};")
    return [*lines, *inner, "}" * ngroups]


# -- reduce_apply.wgsl ---------------------------------------------------------------------------------------------
def apply_subs(kinds: Sequence[str], blocked: Sequence[bool], expr: str, extra_at: int, helpers: str) -> dict[str, str]:
    """reduce_apply.wgsl's substitutions: operand k (texel kind ``kinds[k]``) bound after x and read a texel at a
    time where ``blocked[k]`` (it varies along x's blocked axis) or one element splat over four lanes; ``expr``
    (a vec4<f32> expression of x, o0, o1, ...), the index of the first own word, and ``helpers``."""
    decls = [_fill("operand", K=k, BINDING=k + 1, KIND=kind) for k, kind in enumerate(kinds)]
    decls.append(_fill("uniform", K=len(kinds) + 1))
    loads = [_fill("operand_blocked" if varies else "operand_splat", K=k, KIND=kind, BASE=14 * (k + 1))
             for k, (kind, varies) in enumerate(zip(kinds, blocked, strict=True))]
    return {"DECLS": "\n".join(decls), "LOADS": "\n    ".join(loads), "EXPR": expr, "EXTRA": str(extra_at),
            "HELPERS": helpers}


__all__ = ["CENTER", "GROUP_WORDS", "POST_OPS", "PRE_OPS", "activation4", "addressed_inputs", "apply_subs", "div4",
           "element_statements", "is_file", "kind_functions", "lane_statements", "pool_subs", "reduce_subs", "snippet",
           "texel_inputs", "with_division"]


# -- gpu-compute: the variant files of the ops/*_gpu.py programs ---------------------------------------------------
# A gpu-compute builder names its .wgsl program and picks among its variants; these functions fill the program's
# placeholders with the chosen variant files from wgsl/compute/gen/ (a binding with its accessor, an operand's
# loaders, an epilogue's stores). None of them takes a size: sizes are uniform words, so the source of a program
# depends only on its variants and one pipeline serves every size.
COMPUTE_GEN = "compute/gen"


def winograd_v_binding(texture: bool) -> dict[str, str]:
    """winograd*_in.wgsl's V_BINDING: V, the transformed tiles, and ``store(index, value)`` into it, in a linear
    write-only storage texture (``texture``) or a storage buffer of vec4."""
    return {"V_BINDING": snippet(f"{COMPUTE_GEN}/winograd_v_{'texture' if texture else 'buffer'}.wgsl")}


# How matmul_common.wgsl's operands are held: the form names a loader file (compute/gen/matmul_a_<form>.wgsl,
# matmul_b_<form>.wgsl); the storage type is the operand's array element type (a texture form binds no array).
MATMUL_FORMS = ("vec", "scalar", "half", "tex", "linear")
_STORAGE_TYPES = {"vec": "vec4<f32>", "scalar": "f32", "half": "vec4<f16>", "tex": "vec4<f32>", "linear": "vec4<f32>"}


def matmul_subs(a_form: str, b_form: str, vec4_stores: bool, act: str) -> tuple[dict[str, str], dict[str, int]]:
    """The substitutions and override constants of the matmul kernels (compute/matmul*.wgsl, gemv*.wgsl) for A
    and B held in ``a_form`` and ``b_form`` (MATMUL_FORMS), Y stored a vec4 per group of four columns
    (``vec4_stores``) or per element, and the fused activation ``act`` (a WGSL expression of v, alpha, beta,
    gamma)."""
    if a_form not in MATMUL_FORMS or b_form not in MATMUL_FORMS:
        raise ValueError(f"matmul operand forms {a_form!r}, {b_form!r}: choose among {MATMUL_FORMS}")
    subs = {"TA": _STORAGE_TYPES[a_form], "TB": _STORAGE_TYPES[b_form],
            "LOAD_A": snippet(f"{COMPUTE_GEN}/matmul_a_{a_form}.wgsl"),
            "LOAD_B": snippet(f"{COMPUTE_GEN}/matmul_b_{b_form}.wgsl"),
            "TY": "vec4<f32>" if vec4_stores else "f32",
            "STORES": snippet(f"{COMPUTE_GEN}/matmul_store_{'vec4' if vec4_stores else 'scalar'}.wgsl"),
            "ACT": act, "ENABLE": snippet(f"{COMPUTE_GEN}/enable_f16.wgsl") if "half" in (a_form, b_form) else ""}
    return subs, {"BVEC": int(b_form != "scalar")}  # B's columns count in groups of four unless it is strided


# How binary4.wgsl reads an operand (compute/gen/binary4_<form>.wgsl): "full" (the output's shape, vec4 by vec4),
# "scalar" (one element) or "axis" (one axis that four consecutive output elements share).
BINARY4_FORMS = {"full": "vec4<f32>", "scalar": "f32", "axis": "f32"}  # form -> the operand's storage type
# The first of the six words an axis loader reads (binary4_axis.wgsl), per operand.
BINARY4_AXIS_WORDS = {"A": 6, "B": 12}


def binary4_subs(a_form: str, b_form: str) -> dict[str, str]:
    """binary4.wgsl's storage types and loaders (load_A, load_B) of operands A and B in ``a_form`` and ``b_form``
    (BINARY4_FORMS); the caller adds EXPR and ACT."""
    subs = {}
    for operand, form in (("A", a_form), ("B", b_form)):
        subs[f"T{operand}"] = BINARY4_FORMS[form]
        subs[f"LOAD_{operand}"] = snippet(f"{COMPUTE_GEN}/binary4_{form}.wgsl",
                                          {"OPERAND": operand, "WORD": str(BINARY4_AXIS_WORDS[operand])})
    return subs


__all__ += ["BINARY4_AXIS_WORDS", "BINARY4_FORMS", "COMPUTE_GEN", "MATMUL_FORMS", "binary4_subs", "matmul_subs",
            "winograd_v_binding"]


# -- gpu-pixel matmul, conv and rnn programs (ops/matmul_pixel.py, conv_pixel.py, rnn_pixel.py) -------------------
# Their fragments draw several outputs into as many render targets (a variant: the device's attachments decide how
# many), so the per-output statements repeat, once per target, from the one-line templates in wgsl/pixel/gen/.
def _each(template: str, count: int, sep: str, **subs: int | str) -> str:
    """``template`` filled once per output r < ``count`` (its ``{{R}}``), joined by ``sep``."""
    return sep.join(_fill(template, R=r, **subs) for r in range(count))


def texture(binding: int, name: str, kind: str = "f32") -> str:
    """The declaration of a texture a draw reads: ``name`` at ``binding``, texels of ``kind``."""
    return _fill("texture", K=binding, NAME=name, KIND=kind)


def uniform(binding: int) -> str:
    """The declaration of the draw's parameter block at ``binding`` (after its textures)."""
    return _fill("uniform", K=binding)


def render_targets(count: int) -> dict[str, str]:
    """OUT_STRUCT and OUT_TYPE of a fragment drawing ``count`` rgba32float targets r0, r1, ..."""
    return {"OUT_STRUCT": _fill("targets", FIELDS=_each("target_field", count, "\n    ")), "OUT_TYPE": "Out"}


def assemble_subs(count: int) -> dict[str, str]:
    """matmul_assemble.wgsl's substitutions for ``count`` targets T0, T1, ... of a many-output draw."""
    decls = [texture(r, f"T{r}") for r in range(count)]
    decls.append(uniform(count))
    cases = "\n        ".join([*(_fill("assemble_case", R=r) for r in range(count - 1)),
                               _fill("assemble_default", R=count - 1)])
    return {"DECLS": "\n".join(decls), "ROWS": str(count), "CASES": cases}


def pixel_matmul_subs(rows: int, c_mode: int, act: str) -> dict[str, str]:
    """pixel/matmul.wgsl's substitutions for ``rows`` rows per fragment (one render target each), C's mode (0:
    none, 1: a texel of four columns per (row, block), 2: one value per row) and the fused activation ``act`` (its
    divisions already the device's, ``with_division``)."""
    decls = [texture(2, "C")] if c_mode else []
    decls.append(uniform(3 if c_mode else 2))
    cload = {0: "", 1: snippet("pixel/body/matmul_c_texel.wgsl"), 2: snippet("pixel/body/matmul_c_lane.wgsl")}
    return {"DECLS": "\n".join(decls), "CLOAD": cload[c_mode], **render_targets(rows),
            "ROW_INIT": _each("matmul_row_init", rows, "\n    ", ROWS=rows),
            "ROW_STEP": _each("matmul_row_step", rows, "\n        "),
            "ROW_OUT": _each("matmul_row_out", rows, "\n    "), "ACT": act}


def pixel_conv_subs(columns: int, residual: bool, act: str) -> dict[str, str]:
    """pixel/conv.wgsl's substitutions for ``columns`` output columns per fragment (one render target each), with
    or without a residual Z added before the fused activation ``act`` (its divisions the device's)."""
    decls = [texture(2, "Z"), uniform(3)] if residual else [uniform(2)]
    return {"DECLS": "\n".join(decls), **render_targets(columns),
            "POS_INIT": _each("conv_pos_init", columns, "\n    ", ROWS=columns),
            "POS_TAP": _each("conv_pos_tap", columns, "\n                "),
            "POS_DEPTHWISE": _each("conv_pos_depthwise", columns, "\n                    "),
            "POS_STEP": _each("conv_pos_step", columns, "\n                        "),
            "POS_OUT": _each("conv_pos_out_residual" if residual else "conv_pos_out", columns, "\n    "), "ACT": act}


# pixel/winograd_in.wgsl and winograd_out.wgsl compile the transform matrices' entries in (F(2x2) or F(4x4), the
# variant): the sums below are generated from the matrices ops/conv_pixel.py holds.
def _term(coef: float, value: str) -> str:
    """``coef * value`` as a WGSL addend, without the multiply for +-1."""
    if coef == 1:
        return f" + {value}"
    if coef == -1:
        return f" - {value}"
    return f" + {float(coef)!r} * {value}"


def _combination(coefs: Sequence[float], names: list[str]) -> str:
    """The WGSL sum of ``names`` weighed by ``coefs`` (zeros skipped; the zero vector where all are)."""
    text = "".join(_term(c, name) for c, name in zip(coefs, names, strict=True) if c != 0)
    if not text:
        return "zero"
    return text[3:] if text.startswith(" + ") else "-" + text[3:]


def pixel_winograd_in_subs(bt: Sequence[Sequence[float]], side: int) -> dict[str, str]:
    """winograd_in.wgsl's substitutions for B^T (an A x A array) and output tile ``side``: per row i of B^T the
    input rows it weighs, loaded once each, and per target j the column combination."""
    a = len(bt)
    cols = " ".join(f"let x{v} = xb + {v}; let ok{v} = x{v} >= 0 && x{v} < w;" for v in range(a))
    cases = []
    for i in range(a):
        body = []
        for u in (u for u in range(a) if bt[i][u] != 0):
            loads = " ".join(f"let d{v} = select(zero, textureLoad(X, at(row + u32(max(x{v}, 0)), xs), 0), ok{v});"
                             for v in range(a))
            adds = " ".join(f"e{v} = e{v}{_term(bt[i][u], f'd{v}')};" for v in range(a))
            body.append(f"if (y0 + {u} >= 0 && y0 + {u} < h) {{ let row = (plane + u32(y0 + {u})) * u32(w); "
                        f"{loads} {adds} }}")
        label = "default" if i == a - 1 else f"case {i}u"
        cases.append(f"{label}: {{ " + " ".join(body) + " }")
    columns = " ".join(f"out.r{j} = {_combination(bt[j], [f'e{v}' for v in range(a)])};" for j in range(a))
    return {**render_targets(a), "COLS": cols, "E_INIT": " ".join(f"var e{v} = zero;" for v in range(a)),
            "ROWS": "\n        ".join(cases), "COLUMNS": columns, "S": str(side)}


def pixel_winograd_out_subs(a_t: Sequence[Sequence[float]], residual: bool, act: str) -> dict[str, str]:
    """winograd_out.wgsl's substitutions for A^T (an S x A array): per output row ry the products it weighs, per
    column rx (render target) their combination, with or without a residual Z, and the fused activation ``act``."""
    side, a = len(a_t), len(a_t[0])
    decls = [texture(j, f"P{j}") for j in range(a)]
    decls.append(texture(a, "Bias"))
    if residual:
        decls.append(texture(a + 1, "Z"))
    decls.append(uniform(a + 1 + int(residual)))
    cases = []
    for ry in range(side):
        body = []
        for i in (i for i in range(a) if a_t[ry][i] != 0):
            loads = " ".join(f"q{j} = q{j}{_term(a_t[ry][i], f'textureLoad(P{j}, at(p, ps), 0)')};"
                             for j in range(a))
            body.append(f"{{ let p = p0 + {i}u * step; {loads} }}")
        label = "default" if ry == side - 1 else f"case {ry}u"
        cases.append(f"{label}: {{ " + " ".join(body) + " }")
    columns = []
    for rx in range(side):
        # Columns past OW read Z's last column (a valid texel); they are never assembled into Y.
        z = (f" v{rx} += textureLoad(Z, at(prefix * ow + min(tx * {side}u + {rx}u, ow - 1u), pu(4u)), 0);"
             if residual else "")
        q = _combination(a_t[rx], [f"q{j}" for j in range(a)])
        columns.append(f"var v{rx} = {q} + bias;{z} out.r{rx} = finish(v{rx}, lanes);")
    return {"DECLS": "\n".join(decls), "Q_INIT": " ".join(f"var q{j} = zero;" for j in range(a)),
            "ROWS": "\n        ".join(cases), "S": str(side), **render_targets(side),
            "COLUMNS": "\n    ".join(columns), "ACT": act}


def rnn_join_subs(parts: int) -> dict[str, str]:
    """pixel/rnn_y.wgsl's substitutions for a join of ``parts`` step states X0, X1, ... (part k's texture width
    in params word 9 + k), then the sequence lengths and the parameter block."""
    decls = [texture(k, f"X{k}") for k in range(parts)]
    decls += [texture(parts, "Lens", "i32"), uniform(parts + 1)]
    cases = [_fill("rnn_part_case", R=k, WORD=9 + k) for k in range(parts - 1)]
    cases.append(_fill("rnn_part_default", R=parts - 1, WORD=8 + parts))
    return {"DECLS": "\n".join(decls), "CASES": "\n        ".join(cases)}


# -- gpu-pixel Resize (ops/resize_pixel.py) ---------------------------------------------------------------------
def resize_program(axes: Sequence[tuple[int, int]], combine: str, texel: bool, kind: str,
                   division_function: str) -> tuple[str, str]:
    """The body and helpers of a Resize draw (texels.wgsl where ``texel``, else map.wgsl over elements of
    ``kind``) over the resized ``axes``, each (its axis in the 6-dim frame, taps per output index): the taps of
    output index o along resized axis k are table row pe(1 + k) + o * (2 * taps + 2) (its taps, their weights,
    the outside flag and the divisor; the table is input 1, pe(0) the extrapolation value's bits), combined as
    ``combine`` says ("nearest": the tap; "corners": the sum of (w_inner * ... * w_outer) * x from the first
    term; "passes": one sum per axis, adding x * w / divisor). Table offsets are words, so the source depends
    only on the axes, the tap counts and the combination."""
    acc_type = "vec4<f32>" if texel else kind
    zero = "vec4<f32>(0.0)" if texel else f"{acc_type}(0)"
    lines = ["var d = c; var outside = false; var first = true;"]
    for k, (axis, n) in enumerate(axes):
        lines.append(f"let row{k} = pe({1 + k}u) + c.c[{axis}] * {2 * n + 2}u; "
                     f"let div{k} = tab(row{k} + {2 * n + 1}u);")
        lines.append(f"if (tab(row{k} + {2 * n}u) != 0.0) {{ outside = true; }}")
    lines.append(f"var sum0 = {zero};")
    for k, (axis, n) in enumerate(axes):
        if k and combine == "passes":
            lines.append(f"var sum{k} = {zero};")
        lines.append(f"for (var i{k} = 0u; i{k} < {n}u; i{k}++) {{")
        lines.append(f"d.c[{axis}] = u32(tab(row{k} + i{k})); let w{k} = tab(row{k} + {n}u + i{k});")
    last = len(axes) - 1
    if combine == "nearest":
        lines.append("sum0 = x0(d);" + "}" * len(axes))
    elif combine == "corners":
        weight = f"w{last}"
        for k in reversed(range(last)):
            weight = f"({weight} * w{k})"
        lines.append(f"let term = rz_round({weight} * x0(d)); sum0 = select(sum0 + term, term, first); first = false;")
        lines.append("}" * len(axes))
    else:
        lines.append(f"sum{last} = sum{last} + rz_term(x0(d), w{last}, div{last});")
        for k in reversed(range(last)):
            lines.append(f"}} sum{k} = sum{k} + rz_term(sum{k + 1}, w{k}, div{k});")
        lines.append("}")
    if texel:
        lines.append("out = select(sum0, vec4<f32>(bitcast<f32>(pe(0u))), outside);")
    else:
        lines.append(f"r = select(sum0, bitcast<{acc_type}>(pe(0u)), outside);")
    helpers = [snippet("pixel/body/resize_tab.wgsl")]
    if combine != "nearest":
        rounding = "pixel/body/resize_round_texel.wgsl" if texel else "pixel/body/resize_round_element.wgsl"
        helpers.append(snippet(rounding, None if texel else {"DIV": division_function}))
    return "\n".join(lines), "\n".join(helpers)


__all__ += ["assemble_subs", "pixel_conv_subs", "pixel_matmul_subs", "pixel_winograd_in_subs",
            "pixel_winograd_out_subs", "render_targets", "resize_program", "rnn_join_subs", "texture", "uniform"]


# -- the elementwise ops' expressions (ops/elementwise_gpu.py; elementwise_pixel.py reads them from there) ---------
# One WGSL expression per op, the table generator-owned (the activations' own live in their records,
# ops/activations.py): of ``v`` for a unary op, ``a`` and ``b`` for a binary one (``c`` the third operand of
# Where), read by the programs' EXPR placeholders (compute/unary*.wgsl, binary*.wgsl, map3.wgsl). ``div_f32(`` is
# made the device's division where the expression is used (``with_division``).
FLOAT_UNARY: dict[str, str] = {
    "Abs": "abs(v)", "Neg": "-v", "Exp": "exp_accurate(v)", "Log": "log(v)", "Sqrt": "sqrt(v)",
    "Reciprocal": "div_f32(1.0, v)",
    "Floor": "floor(v)", "Ceil": "ceil(v)", "Round": "round(v)", "Sign": "select(sign(v), v, is_nan_f32(v))",
    "Sin": "sin(v)",
    "Cos": "cos(v)", "Tan": "tan(v)", "Asin": "asin(v)", "Acos": "acos(v)", "Atan": "atan(v)",
    "Sinh": "sinh(v)", "Cosh": "cosh(v)", "Asinh": "asinh(v)", "Acosh": "acosh(v)", "Atanh": "atanh(v)",
    "Erf": "erf_approx(v)",
}
# Integer forms of the float unary functions (v holds int32-range values).
INT_UNARY = {"Abs": "abs(v)", "Neg": "-v", "Sign": "select(select(0, -1, v < 0), 1, v > 0)"}
# op -> {storage type: expression}
ARITH = {
    "Add": {"f32": "a + b", "i32": "a + b"},
    "Sub": {"f32": "a - b", "i32": "a - b"},
    "Mul": {"f32": "a * b", "i32": "a * b"},
    # Integer division truncates toward zero in WGSL as in C, which is what ONNX asks.
    "Div": {"f32": "div_f32(a, b)", "i32": "select(a / b, 0, b == 0)"},
    "Pow": {"f32": "pow_signed(a, b)"},
    "Max": {"f32": "select(max(a, b), a + b, is_nan_f32(a) || is_nan_f32(b))", "i32": "max(a, b)"},
    "Min": {"f32": "select(min(a, b), a + b, is_nan_f32(a) || is_nan_f32(b))", "i32": "min(a, b)"},
    "PRelu": {"f32": "select(a * b, a, a >= 0.0)"},
}
COMPARE = {
    "Equal": "a == b", "Greater": "a > b", "Less": "a < b", "GreaterOrEqual": "a >= b", "LessOrEqual": "a <= b",
}
LOGIC = {"And": "a & b", "Or": "a | b", "Xor": "a ^ b"}
BITWISE = {"BitwiseAnd": "a & b", "BitwiseOr": "a | b", "BitwiseXor": "a ^ b"}
# srem, not %: WGSL's i32 % is undefined for negative operands on NVIDIA's Vulkan driver (math.wgsl).
INT_MOD = {0: "select(select(srem(a, b), srem(a, b) + b, srem(a, b) != 0 && (srem(a, b) < 0) != (b < 0)), 0, b == 0)",
           1: "select(srem(a, b), 0, b == 0)"}
# The single expressions of the other elementwise programs.
EXPRESSIONS = {
    "clip_int": "min(max(v, pi(1u)), pi(2u))",  # the bounds in words 1 and 2
    "not": "1u - v",
    # NaN is the only value not equal to itself (bit test: exponent all ones, mantissa non-zero).
    "is_nan": "select(0u, 1u, (bitcast<u32>(v) & 0x7fffffffu) > 0x7f800000u)",
    "bitwise_not": "~v",
    "shift_right": "a >> u32(select(min(b, 31), 31, b < 0))",
    "shift_left_i32": "select(a << u32(b & 31), 0, b < 0 || b >= 32)",
    "where": "select(c, b, a != 0u)",
    "sum": "a + b", "product": "a * b",  # the steps of Sum/Mean/Max/Min over many inputs
}


def is_inf(detect_positive: int, detect_negative: int) -> str:
    """IsInf's expression for its attributes, each 0 or 1 (a variant each: 1 detects)."""
    return (f"select(0u, 1u, (bitcast<u32>(v) == 0x7f800000u && {int(detect_positive)}u == 1u) || "
            f"(bitcast<u32>(v) == 0xff800000u && {int(detect_negative)}u == 1u))")


def as_bool(condition: str) -> str:
    """A comparison's expression: 1u where ``condition`` holds, else 0u (bool tensors hold u32 0/1)."""
    return f"select(0u, 1u, {condition})"


__all__ += ["ARITH", "BITWISE", "COMPARE", "EXPRESSIONS", "FLOAT_UNARY", "INT_MOD", "INT_UNARY", "LOGIC", "as_bool",
            "is_inf"]


# -- gpu-pixel indexing and tensor bodies (ops/tensor_pixel.py) ---------------------------------------------------
def concat_body(count: int, texel: bool) -> str:
    """pixel/body/concat.wgsl for ``count`` parts x0, x1, ...: a branch per part (pixel/gen/concat_part.wgsl), its
    end along the axis word pe(1 + k), setting the texel ``out`` (texels.wgsl, ``texel``) or the element ``r``
    (map.wgsl). The source depends only on the part count and the form."""
    parts = " else ".join(_fill("concat_part", K=k, END=k + 1, START="0u" if k == 0 else f"pe({k}u)",
                                TAKE="out" if texel else "r") for k in range(count))
    return snippet("pixel/body/concat.wgsl", {"PARTS": parts})


__all__ += ["concat_body"]


# (the elementwise ops' variadic lanes, ops/elementwise_pixel.py: the inputs a, b, c, ... folded in turn)
LANE_NAMES = "abcdefgh"


def folded_lane(count: int, step: str) -> str:
    """A lane folding ``count`` inputs a, b, c, ... into r: r = a, then ``step`` (the lane of a pair a, b setting
    r) with a the running r and b each next input (pixel/gen/lane_fold.wgsl)."""
    return "r = a;" + "".join(" " + _fill("lane_fold", NAME=name, STEP=step) for name in LANE_NAMES[1:count])


def sum_lane(count: int, mean: bool) -> str:
    """r = a + b + c ... of ``count`` inputs, then divided by the count for a mean (the count is structure: one
    binding per input)."""
    lane = "r = " + " + ".join(LANE_NAMES[:count]) + ";"
    return f"{lane} r = r / {float(count)!r};" if mean else lane


__all__ += ["LANE_NAMES", "folded_lane", "sum_lane"]
