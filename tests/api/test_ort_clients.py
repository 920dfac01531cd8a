"""Real onnxruntime clients run unchanged through ``wgsentis.ort.installed()`` on every backend: rapidocr-onnxruntime's
whole OCR (det + cls + rec) on a rendered image, silero-vad's ``get_speech_timestamps`` on a synthetic utterance, and
magika's identification of a few files, each checked against the same pipeline on the real onnxruntime in this
process. A missing package skips its tests; the GPU backends skip where no wgpu adapter opens (helpers.BACKENDS)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import BACKENDS

import wgsentis.ort as wort

pytest.importorskip("onnxruntime")  # the reference every client result is checked against

ROOT = Path(__file__).resolve().parent.parent.parent
SAMPLE_RATE = 16000


@contextlib.contextmanager
def fresh_import(*packages: str) -> Iterator[None]:
    """Let ``packages`` be imported anew inside the block, and put back the modules they had before on leaving.

    rapidocr-onnxruntime and magika run ``from onnxruntime import ...`` / ``import onnxruntime as rt`` when their
    modules load, so a package imported earlier (here: for the reference run on the real onnxruntime) keeps the
    real onnxruntime whatever ``installed()`` later puts in sys.modules. Removing the package's modules makes the
    next import, inside ``installed()``, bind the facade, as a program that installs it before importing the
    package would; restoring them afterwards leaves the rest of the test process with the real one. The objects
    built inside (the OCR engine, the Magika instance) keep the facade sessions they made."""

    def ours(name: str) -> bool:
        return any(name == p or name.startswith(p + ".") for p in packages)

    saved = {name: module for name, module in sys.modules.items() if ours(name)}
    for name in saved:
        del sys.modules[name]
    try:
        yield
    finally:
        for name in [name for name in sys.modules if ours(name)]:
            del sys.modules[name]
        sys.modules.update(saved)


def facade_backend(session: Any) -> str:
    """The backend a client's session runs on, asserting that it is the facade's and not onnxruntime's."""
    assert isinstance(session, wort.InferenceSession), type(session)
    return session.backend


# -- rapidocr-onnxruntime ----------------------------------------------------------------------------------------
def _ocr_image() -> np.ndarray:
    """Two lines of text and an upside-down third (which the cls model has to turn) on white, as BGR."""
    from PIL import Image, ImageDraw, ImageFont

    font = ImageFont.load_default(size=40)
    image = Image.new("RGB", (520, 300), "white")
    draw = ImageDraw.Draw(image)
    draw.text((20, 20), "Hello World", fill="black", font=font)
    draw.text((20, 90), "ONNX 2024", fill="black", font=font)
    line = Image.new("RGB", (300, 60), "white")
    ImageDraw.Draw(line).text((10, 5), "upside down", fill="black", font=font)
    image.paste(line.rotate(180), (200, 200))
    return np.ascontiguousarray(np.asarray(image)[:, :, ::-1])


@pytest.fixture(scope="module")
def ocr_reference() -> tuple[np.ndarray, list]:
    rapidocr = pytest.importorskip("rapidocr_onnxruntime")
    image = _ocr_image()
    result, _ = rapidocr.RapidOCR()(image)
    texts = ["".join(text.split()) for _, text, _ in result or []]
    assert texts == ["HelloWorld", "ONNX2024", "upsidedown"], result  # the real pipeline reads the image
    return image, result


@pytest.mark.parametrize("backend", BACKENDS)
def test_rapidocr_reads_the_same_text_as_onnxruntime(ocr_reference, backend):
    image, want = ocr_reference
    with fresh_import("rapidocr_onnxruntime"), wort.installed(backend):
        from rapidocr_onnxruntime import RapidOCR

        engine = RapidOCR()
    sessions = (engine.text_det.infer.session, engine.text_cls.infer.session, engine.text_rec.session.session)
    assert [facade_backend(s) for s in sessions] == [backend] * 3
    got, _ = engine(image)
    assert [text for _, text, _ in got] == [text for _, text, _ in want]
    for (box, _, score), (want_box, _, want_score) in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(box), np.asarray(want_box), atol=2.0)
        assert score == pytest.approx(want_score, abs=1e-3)


# -- silero-vad --------------------------------------------------------------------------------------------------
def _resonate(signal: np.ndarray, freq: float, bandwidth: float) -> np.ndarray:
    """A two-pole resonator (one formant) over ``signal``."""
    radius = np.exp(-np.pi * bandwidth / SAMPLE_RATE)
    a1, a2 = -2 * radius * np.cos(2 * np.pi * freq / SAMPLE_RATE), radius * radius
    out = np.zeros_like(signal)
    y1 = y2 = 0.0
    for n, x in enumerate(signal):
        out[n] = y0 = x - a1 * y1 - a2 * y2
        y1, y2 = y0, y1
    return out


def _utterance() -> np.ndarray:
    """0.5 s of faint noise, 1 s of vowel-like sound (a gliding-pitch pulse train through three formants, four
    vowels, a syllable-rate envelope), 0.5 s of faint noise: float32 at 16 kHz."""
    rng = np.random.default_rng(0)
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    phase = np.cumsum(120 + 30 * np.sin(2 * np.pi * 1.5 * t)) / SAMPLE_RATE
    source = (np.diff(np.floor(phase), prepend=0) > 0) + 0.02 * rng.standard_normal(len(t))
    voiced = np.zeros(len(t))
    vowels = [(700, 1220, 2600), (300, 2300, 3000), (500, 900, 2500), (400, 2000, 2600)]
    part = len(t) // len(vowels)
    for i, (f1, f2, f3) in enumerate(vowels):
        piece = source[i * part:(i + 1) * part]
        voiced[i * part:(i + 1) * part] = (_resonate(piece, f1, 80) + 0.7 * _resonate(piece, f2, 100)
                                           + 0.4 * _resonate(piece, f3, 150))
    voiced *= 0.55 - 0.45 * np.cos(2 * np.pi * 4 * t)
    silence = [0.001 * rng.standard_normal(SAMPLE_RATE // 2) for _ in range(2)]
    return np.concatenate([silence[0], 0.4 * voiced / np.abs(voiced).max(), silence[1]]).astype(np.float32)


# silero-vad's own model.py uses importlib.resources.path, deprecated: not the facade's warning to show (the mark
# covers the tests' set-up too, where vad_reference loads the model).
SILERO_WARNING = "ignore:path is deprecated:DeprecationWarning"


@pytest.fixture(scope="module")
def vad_reference() -> tuple[Any, list, Any]:
    pytest.importorskip("torch")
    silero_vad = pytest.importorskip("silero_vad")
    import torch

    wave = torch.from_numpy(_utterance())
    model = silero_vad.load_silero_vad(onnx=True)
    segments = silero_vad.get_speech_timestamps(wave, model, sampling_rate=SAMPLE_RATE)
    assert len(segments) >= 1, "the real onnxruntime detects no speech in the synthetic utterance"
    return wave, segments, model.audio_forward(wave, SAMPLE_RATE)


@pytest.mark.filterwarnings(SILERO_WARNING)
@pytest.mark.parametrize("backend", BACKENDS)
def test_silero_vad_finds_the_same_speech_as_onnxruntime(vad_reference, backend):
    import silero_vad

    wave, want, want_probs = vad_reference
    # silero-vad imports onnxruntime inside OnnxWrapper.__init__, so building the model inside installed() suffices.
    with wort.installed(backend):
        model = silero_vad.load_silero_vad(onnx=True)
    assert facade_backend(model.session) == backend
    assert silero_vad.get_speech_timestamps(wave, model, sampling_rate=SAMPLE_RATE) == want
    np.testing.assert_allclose(model.audio_forward(wave, SAMPLE_RATE).numpy(), want_probs.numpy(), atol=1e-4)


# -- magika ------------------------------------------------------------------------------------------------------
SHELL_SCRIPT = b"#!/bin/bash\necho hello world\nfor i in 1 2 3; do echo $i; done\n"


@pytest.fixture(scope="module")
def magika_files(tmp_path_factory) -> list[Path]:
    """A Python and a Markdown file of the repo, and a PNG, a JSON and a text file made here."""
    from PIL import Image

    folder = tmp_path_factory.mktemp("magika")
    pixels = (np.random.default_rng(0).random((64, 64, 3)) * 255).astype(np.uint8)
    Image.fromarray(pixels).save(folder / "noise.png")
    (folder / "config.json").write_text('{"name": "wgsentis", "backends": ["cpu", "gpu-compute", "gpu-pixel"], '
                                        '"version": 1, "nested": {"ok": true}}\n')
    (folder / "notes.txt").write_text("This is a plain text file written for the test. It has a few sentences of "
                                      "English prose, nothing more.\n" * 3)
    return [ROOT / "wgsentis" / "ort.py", ROOT / "README.md", folder / "noise.png", folder / "config.json",
            folder / "notes.txt"]


def _identities(results: list) -> list[tuple[str, str, str]]:
    # Labels as strings: a fresh import of magika makes its enum classes anew.
    return [(str(r.status), str(r.output.label), str(r.dl.label)) for r in results]


@pytest.fixture(scope="module")
def magika_reference(magika_files) -> list:
    magika = pytest.importorskip("magika").Magika()
    results = [*magika.identify_paths(magika_files), magika.identify_bytes(SHELL_SCRIPT)]
    labels = [label for _, label, _ in _identities(results)]
    assert labels == ["python", "markdown", "png", "json", "txt", "shell"], labels
    return results


@pytest.mark.parametrize("backend", BACKENDS)
def test_magika_identifies_files_as_onnxruntime_does(magika_files, magika_reference, backend):
    with fresh_import("magika"), wort.installed(backend):
        from magika import Magika

        magika = Magika()
    assert facade_backend(magika._onnx_session) == backend
    got = [*magika.identify_paths(magika_files), magika.identify_bytes(SHELL_SCRIPT)]
    assert _identities(got) == _identities(magika_reference)
    assert [r.score for r in got] == pytest.approx([r.score for r in magika_reference], abs=2e-3)
