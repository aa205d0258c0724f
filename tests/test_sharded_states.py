"""Extraction from a backbone sharded over several devices (``backbone.device_map``): accelerate puts the
embeddings on the first device and the last layers, final norm and lm_head on the last, so whatever indexes
the last hidden states must be there.  No second GPU here: the tiny Qwen3's end is placed on "meta" (a real
torch device that holds shapes, no data), its start on the CPU, and the forward pass is stopped at its
entry, where the index has been built."""
from __future__ import annotations

import pytest
import torch


@pytest.fixture
def end_elsewhere():
    """A tiny random Qwen3 whose embeddings and layers sit on the CPU and whose final norm and lm_head sit
    on another device."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.for_model("qwen3", hidden_size=16, intermediate_size=32, num_hidden_layers=2,
                                  num_attention_heads=2, num_key_value_heads=1, head_dim=8, vocab_size=64,
                                  tie_word_embeddings=False)
    model = AutoModelForCausalLM.from_config(config)
    model.model.norm.to("meta")
    model.lm_head.to("meta")
    return model


class Stopped(Exception):
    """The forward pass stopped at its entry (the meta half cannot compute)."""


def test_the_output_device_is_where_a_sharded_model_ends_not_where_it_starts(end_elsewhere):
    from spanuq.llm.states import output_device

    assert next(end_elsewhere.parameters()).device == torch.device("cpu")  # the embeddings
    assert output_device(end_elsewhere) == torch.device("meta")  # the final norm, the lm_head


def test_extraction_builds_the_logits_index_on_the_output_device(end_elsewhere):
    """``logits_to_keep`` (the response positions whose logits are computed) indexes the last hidden
    states: built on the first parameter's device, a model sharded over two GPUs fails with "indices
    should be either on cpu or on the same device as the indexed tensor"."""
    from spanuq.llm.states import teacher_forced_ids

    seen = {}

    def at_entry(module, args, kwargs):
        seen["logits_to_keep"] = kwargs["logits_to_keep"]
        raise Stopped

    end_elsewhere.register_forward_pre_hook(at_entry, with_kwargs=True)
    with pytest.raises(Stopped):
        list(teacher_forced_ids(end_elsewhere, [[1, 2, 3]], [[4, 5]], layers=[1, 2]))
    assert seen["logits_to_keep"].device == torch.device("meta")
    assert seen["logits_to_keep"].shape == (3,)  # the last prompt position and the two response positions


def test_layers_computed_on_two_devices_are_fused_on_the_last():
    """The fused layers of a sharded model may straddle two GPUs (Qwen3-30B-A3B's 30, 34, 38 over four)."""
    from spanuq.llm.states import fuse_layers

    fused = fuse_layers([torch.ones(5, 16), torch.ones(5, 16, device="meta")])
    assert fused.device == torch.device("meta") and fused.shape == (5, 16)
