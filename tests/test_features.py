"""Hidden-state extraction and the sharded, memory-mapped feature store."""
import json

import pytest
import torch

from spanuq.features.store import FeatureStore, ShardWriter
from spanuq.llm.loading import chat_prompt, response_token_ids
from spanuq.llm.states import FeatureItem, extract_batch, teacher_forced, token_entropy


@pytest.fixture(scope="module")
def backbone():
    from spanuq.config import load_config
    from spanuq.llm.loading import load_backbone

    return load_backbone(load_config(None))


def test_fused_states_are_the_mean_of_the_chosen_layers_at_response_positions(backbone):
    model, tok = backbone
    chat = chat_prompt(tok, "What is the capital of Australia?")
    resp = response_token_ids(tok, "The capital of Australia is Canberra.")
    (item,) = extract_batch(model, tok, [chat], [resp], layers=[16, 18, 20], out_dtype=torch.float32)
    assert item.h.shape == (len(resp), 576) and item.token_ids.tolist() == resp
    ids = torch.tensor([tok(chat, add_special_tokens=False)["input_ids"] + resp])
    with torch.inference_mode():
        out = model(input_ids=ids, output_hidden_states=True)
    P = ids.shape[1] - len(resp)
    want = torch.stack([out.hidden_states[l][0, P:] for l in (16, 18, 20)]).mean(0)
    torch.testing.assert_close(item.h, want, atol=1e-4, rtol=1e-4)
    # entropy of the distribution each response token was decoded from
    torch.testing.assert_close(item.entropy, token_entropy(out.logits[0, P - 1:-1]), atol=1e-4, rtol=1e-4)
    assert (item.entropy >= 0).all()


def test_batching_with_padding_does_not_change_features(backbone):
    model, tok = backbone
    chats = [chat_prompt(tok, q) for q in ("Who wrote Hamlet?", "Why is the sky blue? Explain briefly.")]
    resps = [response_token_ids(tok, t) for t in ("Shakespeare.", "Rayleigh scattering of sunlight by air.")]
    together = extract_batch(model, tok, chats, resps, [10], torch.float32)
    alone = [extract_batch(model, tok, [c], [r], [10], torch.float32)[0] for c, r in zip(chats, resps)]
    for a, b in zip(together, alone):
        torch.testing.assert_close(a.h, b.h, atol=2e-3, rtol=1e-3)


def test_teacher_forced_returns_every_layer(backbone):
    model, tok = backbone
    ((hidden, logits),) = teacher_forced(model, tok, [chat_prompt(tok, "Hi")], [response_token_ids(tok, "Hello there")])
    assert hidden.shape[0] == model.config.num_hidden_layers + 1 and logits.shape[0] == hidden.shape[1]


def test_store_shards_round_trip_with_checksums(tmp_path):
    g = torch.Generator().manual_seed(0)
    items = {f"p{i}": FeatureItem(torch.randn(5 + i, 8, generator=g).half(), torch.rand(5 + i),
                                  torch.arange(5 + i, dtype=torch.int32), torch.rand(5 + i)) for i in range(7)}
    w = ShardWriter(tmp_path / "f", {"d_model": 8, "layers": [1]}, shard_tokens=20)
    for k, v in items.items():
        w.add(k, v)
    w.close()
    store = FeatureStore(tmp_path / "f", verify=True)
    assert len(store.shards) > 1 and len(store) == 7 and store.d_model == 8
    for k, v in items.items():
        got = store[k]
        assert torch.equal(got.h, v.h) and torch.equal(got.entropy, v.entropy) and torch.equal(got.token_ids, v.token_ids)
        assert torch.equal(got.surprisal, v.surprisal)
    # bytes per token ≈ 2·d (fp16) + 12 (entropy, surprisal fp32 + token id int32) + safetensors headers
    size = sum(p.stat().st_size for p in (tmp_path / "f").glob("shard-*"))
    tokens = sum(v.h.shape[0] for v in items.values())
    assert 2 * 8 + 12 <= size / tokens < 2 * 8 + 12 + 30
    # a corrupted shard is detected
    shard = next((tmp_path / "f").glob("shard-*"))
    data = bytearray(shard.read_bytes()); data[-1] ^= 0xFF; shard.write_bytes(bytes(data))
    with pytest.raises(ValueError, match="checksum"):
        FeatureStore(tmp_path / "f", verify=True)


def test_duplicate_ids_and_missing_index_are_clear_errors(tmp_path):
    w = ShardWriter(tmp_path / "f", {"d_model": 2})
    it = FeatureItem(torch.zeros(1, 2).half(), torch.zeros(1), torch.zeros(1, dtype=torch.int32), torch.zeros(1))
    w.add("a", it)
    with pytest.raises(ValueError, match="one surprisal per answer token"):
        w.add("b", FeatureItem(it.h, it.entropy, it.token_ids))
    with pytest.raises(ValueError, match="duplicate"):
        w.add("a", it)
    with pytest.raises(FileNotFoundError, match="spanuq extract"):
        FeatureStore(tmp_path / "nothing")


def test_a_hub_backbone_loads_from_a_local_folder_of_its_name(make_cfg, tmp_path):
    """Qwen3 presets load by hub id, or from ``<paths.models>/<preset name>`` when that folder exists.

    Here the folder holds a tiny random-weight Qwen3 built from a config (and the
    shipped tokenizer), so the hub code path runs offline end to end.
    """
    from transformers import AutoConfig, AutoModelForCausalLM

    from spanuq.llm.loading import load_backbone, load_tokenizer

    tok = load_tokenizer(make_cfg())  # the default backbone's tokenizer, with its chat template
    config = AutoConfig.for_model("qwen3", hidden_size=32, intermediate_size=64, num_hidden_layers=3,
                                  num_attention_heads=4, num_key_value_heads=2, head_dim=8,
                                  vocab_size=len(tok), tie_word_embeddings=True)
    torch.manual_seed(0)
    folder = tmp_path / "models" / "qwen3-8b"
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tok.save_pretrained(folder)

    cfg = make_cfg("backbone.name=qwen3-8b", f"paths.models={tmp_path / 'models'}", "backbone.layers=[1,3]")
    model, qtok = load_backbone(cfg)
    assert type(model).__name__ == "Qwen3ForCausalLM" and model.config.hidden_size == 32
    chat = chat_prompt(qtok, "Who wrote Hamlet?")
    resp = response_token_ids(qtok, "William Shakespeare wrote Hamlet.")
    (item,) = extract_batch(model, qtok, [chat], [resp], layers=cfg.backbone.layers, out_dtype=torch.float32)
    assert item.h.shape == (len(resp), 32) and torch.isfinite(item.h).all()


def test_the_extract_stage_writes_the_same_features_folder_from_the_same_answers(backbone, make_cfg):
    """DVC hashes the features folder: the same answers give the same bytes on a re-run (what came
    from the cache and the seconds go to runs/extract.json, outside the folder), so dvc.lock does not move."""
    from spanuq.features.stage import run_extract
    from spanuq.pipeline.files import write_jsonl
    from spanuq.pipeline.paths import StagePaths
    from spanuq.pipeline.records import Generation, Sample

    _, tok = backbone
    cfg = make_cfg()
    paths = StagePaths.from_config(cfg)
    qa = [("Who wrote Hamlet?", "Shakespeare wrote it around 1600."), ("What is the capital of Peru?", "Lima.")]
    write_jsonl(paths.generations, [
        Generation(prompt_id=f"p{i}", backbone=cfg.backbone.name, prompt_text=q, chat_prompt=chat_prompt(tok, q),
                   greedy=Sample(text=a, token_ids=response_token_ids(tok, a)), samples=[], decoding={}, seed=0)
        for i, (q, a) in enumerate(qa)])

    def folder() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in sorted(paths.features.iterdir())}

    run_extract(cfg, progress=False)
    first, log = folder(), paths.run_log("extract")
    first_log = json.loads(log.read_text()) if log.exists() else None
    run_extract(cfg, progress=False)  # from the stage's cache now
    assert folder() == first
    assert first_log["extracted_now"] == 2 and json.loads(log.read_text())["extracted_now"] == 0
