"""Developer tool: transformer decoders exported by torch.onnx, and greedy generation through any runner.

The models are ``transformers`` configurations with random weights (seeded; nothing is downloaded), exported
with the TorchScript-based ``torch.onnx.export`` the way users export them, with ``past_key_values`` as flat
inputs and ``present`` outputs, every sequence dim dynamic:

- ``gpt2``: a GPT-2-style decoder (``GPT2LMHeadModel``): inputs ``input_ids`` (batch, seq), ``attention_mask``
  (batch, past + seq) and ``past_<i>_k`` / ``past_<i>_v`` (batch, heads, past, head size) per layer; outputs
  ``logits`` (batch, seq, vocab) and ``present_<i>_k`` / ``present_<i>_v`` (batch, heads, past + seq, head size).
- ``whisper``: a Whisper-style encoder-decoder (``WhisperForConditionalGeneration``) as two files: the encoder
  (``input_features`` (batch, mel bins, frames) -> ``encoder_hidden_states``) and the decoder with a self-attention
  cache (``decoder_input_ids``, ``encoder_hidden_states``, ``past_<i>_k`` / ``past_<i>_v`` -> ``logits``,
  ``present_<i>_k`` / ``present_<i>_v``); the cross-attention keys are recomputed from the encoder states each step.
- ``bert``: a BERT-style encoder (``BertModel``, no pooler): ``input_ids``, ``attention_mask`` (batch, seq) ->
  ``last_hidden_state`` (batch, seq, width), for sequences of any length (``tools/bench.py --sizes``).

``generate`` runs greedy generation through a function of feeds (ONNX Runtime's ``session.run``, a wgsentis Worker)
and returns the tokens and per-step seconds: what the tests compare and ``tools/bench.py --generate`` times.

    python tools/decoders.py [--out .cache/decoders]      # export all three; prints the files

Needs the ``decoders`` extra (torch, transformers); the exports are cached by configuration.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / ".cache" / "decoders"


@dataclass(frozen=True)
class DecoderConfig:
    """The size of an exported decoder: layers, width, heads and vocabulary (GPT-2's own 50257 by default)."""

    layers: int = 4
    width: int = 256
    heads: int = 4
    vocab: int = 50257
    positions: int = 256
    seed: int = 0

    @property
    def head_size(self) -> int:
        return self.width // self.heads

    def tag(self, kind: str) -> str:
        digest = hashlib.sha256(json.dumps({"kind": kind, **asdict(self)}, sort_keys=True).encode()).hexdigest()
        return f"{kind}-{self.layers}x{self.width}-v{self.vocab}-{digest[:8]}"


def past_names(layers: int) -> list[str]:
    return [f"past_{i}_{kv}" for i in range(layers) for kv in "kv"]


def present_names(layers: int) -> list[str]:
    return [f"present_{i}_{kv}" for i in range(layers) for kv in "kv"]


def _cache_from(past: tuple[Any, ...], layers: int) -> Any:
    from transformers.cache_utils import DynamicCache

    cache = DynamicCache()
    for i in range(layers):
        cache.update(past[2 * i], past[2 * i + 1], i)
    return cache


def _flat_cache(cache: Any, layers: int) -> list[Any]:
    flat = []
    for i in range(layers):
        layer = cache.layers[i]
        flat += [layer.keys, layer.values]
    return flat


def _export(module: Any, args: tuple[Any, ...], path: Path, inputs: list[str], outputs: list[str],
            dynamic: dict[str, dict[int, str]]) -> None:
    import torch

    tmp = path.with_suffix(".tmp.onnx")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the tracer's warnings on Python branches over sizes
        torch.onnx.export(module, args, str(tmp), input_names=inputs, output_names=outputs,
                          dynamic_axes=dynamic, opset_version=17, dynamo=False)
    tmp.replace(path)


# Wider than the 0.02 of a real initialisation: random weights that small make greedy decoding repeat one token,
# which would hide a wrong step; at this range the tokens vary from step to step.
INIT_RANGE = 0.2


def export_gpt2(out: Path = DEFAULT_OUT, config: DecoderConfig = DecoderConfig()) -> Path:
    """The GPT-2-style decoder with past_key_values as an ONNX file in ``out`` (exported once per config)."""
    path = out / f"{config.tag('gpt2')}.onnx"
    if path.exists():
        return path
    import torch
    from transformers import GPT2Config, GPT2LMHeadModel

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model = GPT2LMHeadModel(GPT2Config(n_layer=config.layers, n_embd=config.width, n_head=config.heads,
                                       vocab_size=config.vocab, n_positions=config.positions, bos_token_id=1,
                                       eos_token_id=2, initializer_range=INIT_RANGE)).eval()
    layers = config.layers

    class WithFlatCache(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any, *past: Any) -> tuple[Any, ...]:
            result = self.model(input_ids=input_ids, attention_mask=attention_mask,
                                past_key_values=_cache_from(past, layers), use_cache=True)
            return (result.logits, *_flat_cache(result.past_key_values, layers))

    # Traced with a non-empty past, so the cache's concatenation is what the graph holds.
    past = tuple(torch.randn(1, config.heads, 2, config.head_size) for _ in range(2 * layers))
    ids = torch.tensor([[1, 2, 3]])
    mask = torch.ones(1, 5, dtype=torch.int64)
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "total"},
               "logits": {0: "batch", 1: "seq"}}
    dynamic.update({n: {0: "batch", 2: "past"} for n in past_names(layers)})
    dynamic.update({n: {0: "batch", 2: "total"} for n in present_names(layers)})
    with torch.no_grad():
        _export(WithFlatCache(), (ids, mask, *past), path, ["input_ids", "attention_mask", *past_names(layers)],
                ["logits", *present_names(layers)], dynamic)
    return path


WHISPER_MELS = 80
WHISPER_FRAMES = 200  # 2 s of audio at Whisper's 10 ms hop; the encoder's positions are half of it


WHISPER_CONFIG = DecoderConfig(layers=2, width=128, heads=4, vocab=1000)


def export_whisper(out: Path = DEFAULT_OUT, config: DecoderConfig = WHISPER_CONFIG) -> tuple[Path, Path]:
    """The Whisper-style encoder and decoder (with a self-attention cache) as two ONNX files in ``out``."""
    enc_path = out / f"{config.tag('whisper')}-encoder.onnx"
    dec_path = out / f"{config.tag('whisper')}-decoder.onnx"
    if enc_path.exists() and dec_path.exists():
        return enc_path, dec_path
    import torch
    from transformers import WhisperConfig, WhisperForConditionalGeneration

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    cfg = WhisperConfig(vocab_size=config.vocab, num_mel_bins=WHISPER_MELS, encoder_layers=config.layers,
                        decoder_layers=config.layers, encoder_attention_heads=config.heads,
                        decoder_attention_heads=config.heads, d_model=config.width,
                        encoder_ffn_dim=4 * config.width, decoder_ffn_dim=4 * config.width,
                        max_source_positions=WHISPER_FRAMES // 2, max_target_positions=config.positions,
                        decoder_start_token_id=1, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                        init_std=INIT_RANGE)
    model = WhisperForConditionalGeneration(cfg).eval()
    layers = config.layers

    class Encoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.encoder = model.model.encoder

        def forward(self, input_features: Any) -> Any:
            return self.encoder(input_features=input_features).last_hidden_state

    class Decoder(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.decoder = model.model.decoder
            self.proj = model.proj_out

        def forward(self, decoder_input_ids: Any, encoder_hidden_states: Any, *past: Any) -> tuple[Any, ...]:
            import torch
            from transformers.cache_utils import DynamicCache, EncoderDecoderCache

            # Positions from the self-attention cache's length, explicitly: the decoder's own count would also
            # see the cross-attention cache.
            start = past[0].shape[2]
            positions = torch.arange(decoder_input_ids.shape[1]) + start
            result = self.decoder(input_ids=decoder_input_ids, encoder_hidden_states=encoder_hidden_states,
                                  past_key_values=EncoderDecoderCache(_cache_from(past, layers), DynamicCache()),
                                  use_cache=True, position_ids=positions.unsqueeze(0), cache_position=positions)
            cache = result.past_key_values.self_attention_cache  # the cross-attention's is recomputed each step
            return (self.proj(result.last_hidden_state), *_flat_cache(cache, layers))

    features = torch.randn(1, WHISPER_MELS, WHISPER_FRAMES)
    with torch.no_grad():
        _export(Encoder(), (features,), enc_path, ["input_features"], ["encoder_hidden_states"],
                {"input_features": {0: "batch"}, "encoder_hidden_states": {0: "batch"}})
        states = Encoder()(features)
        past = tuple(torch.randn(1, config.heads, 2, config.head_size) for _ in range(2 * layers))
        dynamic = {"decoder_input_ids": {0: "batch", 1: "seq"}, "encoder_hidden_states": {0: "batch"},
                   "logits": {0: "batch", 1: "seq"}}
        dynamic.update({n: {0: "batch", 2: "past"} for n in past_names(layers)})
        dynamic.update({n: {0: "batch", 2: "total"} for n in present_names(layers)})
        _export(Decoder(), (torch.tensor([[1, 5, 7]]), states, *past), dec_path,
                ["decoder_input_ids", "encoder_hidden_states", *past_names(layers)],
                ["logits", *present_names(layers)], dynamic)
    return enc_path, dec_path


ENCODER_CONFIG = DecoderConfig(layers=4, width=256, heads=4, vocab=1000, positions=512)


def export_bert(out: Path = DEFAULT_OUT, config: DecoderConfig = ENCODER_CONFIG) -> Path:
    """A BERT-style encoder (``BertModel``) as an ONNX file in ``out``: ``input_ids`` and ``attention_mask``
    (batch, seq) -> ``last_hidden_state`` (batch, seq, width), the sequence dim dynamic: a batch of sentences
    padded to its longest, a new length each call (what ``tools/bench.py --sizes`` sweeps)."""
    path = out / f"{config.tag('bert')}.onnx"
    if path.exists():
        return path
    import torch
    from transformers import BertConfig, BertModel

    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(config.seed)
    model = BertModel(BertConfig(vocab_size=config.vocab, hidden_size=config.width,
                                 num_hidden_layers=config.layers, num_attention_heads=config.heads,
                                 intermediate_size=4 * config.width, max_position_embeddings=config.positions,
                                 initializer_range=INIT_RANGE), add_pooling_layer=False).eval()

    class HiddenStates(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any, attention_mask: Any) -> Any:
            return self.model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    ids = torch.tensor([[1, 5, 7, 9, 2, 0]])
    mask = torch.tensor([[1, 1, 1, 1, 1, 0]])
    dynamic = {"input_ids": {0: "batch", 1: "seq"}, "attention_mask": {0: "batch", 1: "seq"},
               "last_hidden_state": {0: "batch", 1: "seq"}}
    with torch.no_grad():
        _export(HiddenStates(), (ids, mask), path, ["input_ids", "attention_mask"], ["last_hidden_state"], dynamic)
    return path


@dataclass
class Generation:
    """A greedy generation: the tokens, the last position's logits and the seconds of each step."""

    tokens: list[int]
    logits: list[np.ndarray]
    seconds: list[float]


Run = Callable[[dict[str, Any]], Mapping[str, Any]]


def generate(run: Run, *, layers: int, heads: int, head_size: int, steps: int, prompt: list[int],
             ids_name: str = "input_ids", extra: Mapping[str, Any] | None = None,
             mask: bool = True) -> Generation:
    """Greedy generation of ``steps`` tokens after ``prompt``: each step feeds the last step's ``present`` outputs
    back as ``past`` (whatever ``run`` returns for them: numpy arrays, or device tensors that stay on the device)
    and takes the argmax of the last position's logits. ``run`` maps feeds to outputs by name; ``extra``: feeds
    given every step (the encoder's states)."""
    ids = np.array([prompt], np.int64)
    past: list[Any] = [np.zeros((1, heads, 0, head_size), np.float32) for _ in range(2 * layers)]
    total = len(prompt)
    result = Generation([], [], [])
    for _ in range(steps):
        feeds: dict[str, Any] = {ids_name: ids, **dict(zip(past_names(layers), past, strict=True))}
        if mask:
            feeds["attention_mask"] = np.ones((1, total), np.int64)
        if extra:
            feeds.update(extra)
        started = time.perf_counter()
        outputs = run(feeds)
        logits = np.asarray(outputs["logits"])
        result.seconds.append(time.perf_counter() - started)
        past = [outputs[n] for n in present_names(layers)]
        token = int(np.argmax(logits[0, -1]))
        result.tokens.append(token)
        result.logits.append(logits[0, -1].copy())
        ids = np.array([[token]], np.int64)
        total += 1
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=DEFAULT_OUT)
    args = parser.parse_args(argv)
    print(export_gpt2(args.out))
    print(export_bert(args.out))
    for path in export_whisper(args.out):
        print(path)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
