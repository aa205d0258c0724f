"""Lookback ratios (`spanuq.llm.lookback`): each head's attention on the sources against that on the answer so
far, read in the pass that gives the probe's states — the same on the KV cache of the sources as in one pass,
and what the formula says of the attention weights."""
import torch

from spanuq.context.passages import Passage
from spanuq.context.render import render
from spanuq.llm.lookback import eager_attention, extract_with_lookback, source_positions, span_lookback
from spanuq.llm.prefix import PrefixCache
from spanuq.llm.states import extract_batch

SOURCE = "Chemists first reported neon in 1898. The first to isolate it was William Ramsay, in England."
QUESTION = "When was neon first identified?"
ANSWERS = ["Neon was first identified in 1898.", "Neon was first identified in 1824.", "It was found in England."]


def chat(scorer):
    r = render(scorer.tok, [{"role": "user", "content": QUESTION}], [(1, Passage("1", SOURCE), 0, len(SOURCE))],
               scorer.system_prompt)  # as the scorer renders it
    return r.chat, source_positions(scorer.tok, r.chat, r.read)


def test_the_source_tokens_are_the_passage_text_in_the_chat(scorer):
    text, src = chat(scorer)
    ids = scorer.tok(text, add_special_tokens=False)["input_ids"]
    assert scorer.tok.decode([ids[j] for j in src]).strip() == SOURCE


def test_lookback_is_the_share_of_the_mean_attention_on_the_sources(scorer):
    text, src = chat(scorer)
    prompt = scorer.tok(text, add_special_tokens=False)["input_ids"]
    ids = scorer.tok(ANSWERS[0], add_special_tokens=False)["input_ids"]
    with scorer.lock:
        item = extract_with_lookback(scorer.model, scorer.tok, [text], [ids], scorer.layers, [src])[0]
        with eager_attention(scorer.model), torch.inference_mode():
            att = scorer.model(input_ids=torch.tensor([prompt + ids]), output_attentions=True).attentions
    n_layers, n_heads = len(att), att[0].shape[1]
    assert item.lookback.shape == (len(ids), n_layers * n_heads)
    P, t, layer, head = len(prompt), 3, n_layers - 1, 2
    row = att[layer][0, head, P + t]
    a_src, a_new = row[src].mean(), row[P: P + t + 1].mean()
    torch.testing.assert_close(item.lookback[t, layer * n_heads + head], a_src / (a_src + a_new))
    assert ((item.lookback > 0) & (item.lookback < 1)).all()
    # and the states are those of the pass without attention weights
    one = extract_batch(scorer.model, scorer.tok, [text], [ids], scorer.layers, scorer.out_dtype)[0]
    torch.testing.assert_close(item.surprisal, one.surprisal, atol=1e-4, rtol=1e-4)
    assert span_lookback(item.lookback.numpy(), [(0, 1), (2, len(ids) - 1)]).shape == (2, n_layers * n_heads)


def test_lookback_on_the_cache_of_the_sources_is_that_of_one_pass(scorer):
    text, src = chat(scorer)
    prompt = scorer.tok(text, add_special_tokens=False)["input_ids"]
    attn = scorer.model.config._attn_implementation
    cache = PrefixCache(scorer.model, scorer.layers, scorer.out_dtype, entries=1)
    with scorer.lock:
        plain = cache.read(prompt, scorer.tok(ANSWERS[2], add_special_tokens=False)["input_ids"])
        assert plain.lookback is None  # not asked: not computed
        for answer in ANSWERS:  # the later answers share their first tokens with the one before
            ids = scorer.tok(answer, add_special_tokens=False)["input_ids"]
            got = cache.read(prompt, ids, src)
            one = extract_with_lookback(scorer.model, scorer.tok, [text], [ids], scorer.layers, [src])[0]
            torch.testing.assert_close(got.lookback, one.lookback, atol=1e-4, rtol=1e-3)
    assert scorer.model.config._attn_implementation == attn  # eager only while the weights are read


def test_a_with_sources_mapping_that_reads_the_heads_scores_each_span_with_its_lookback(scorer, monkeypatch):
    """The scorer reads the heads' attention only where the mapping of the answer reads it (a given answer with
    sources), on the prefix cache as in one pass, and each span's û is the mapping of its raw û, (S, H₀) and
    its heads' mean lookback ratios."""
    import numpy as np
    from scipy.special import expit, logit

    from spanuq.model.calibration import span_terms
    from spanuq.train.grounded_calibration import with_grounded

    heads = scorer.model.config.num_hidden_layers * scorer.model.config.num_attention_heads
    weights = np.random.default_rng(0).normal(0, 3.0, heads)
    entry = {"temperature": 2.0, "bias": -0.5, "surprisal": 0.2, "context": 0.1, "lookback": list(weights),
             "flag": 0.5}
    monkeypatch.setattr(scorer, "calibration", with_grounded(scorer.calibration, entry))
    attn = scorer.model.config._attn_implementation
    text, src = chat(scorer)
    results = {}
    for cache in (0, 1):
        monkeypatch.setattr(scorer.cfg.score, "prefix_cache", cache)
        results[cache] = [scorer.score(QUESTION, response=a, context=[SOURCE]) for a in ANSWERS]
    assert scorer.model.config._attn_implementation == attn
    for one, cached in zip(results[0], results[1]):
        assert [(s.b, s.e) for s in one.spans] == [(s.b, s.e) for s in cached.spans]
        np.testing.assert_allclose([s.u for s in one.spans], [s.u for s in cached.spans], atol=2e-3)
    for answer, r in zip(ANSWERS, results[0]):
        assert r.calibration_source == "given+context" and r.spans
        ids = scorer.tok(answer, add_special_tokens=False)["input_ids"]
        with scorer.lock:
            f = extract_with_lookback(scorer.model, scorer.tok, [text], [ids], scorer.layers, [src])[0]
        x = span_terms(f.surprisal.numpy(), f.entropy.numpy(), [(s.b, s.e) for s in r.spans], f.lookback.numpy())
        want = expit(logit(np.clip([s.u_raw for s in r.spans], 1e-6, 1 - 1e-6)) / 2.0 - 0.5 + 0.2 * x[:, 0]
                     - 0.1 * x[:, 1] + x[:, 2:] @ weights)
        np.testing.assert_allclose([s.u for s in r.spans], want, atol=2e-3)
    # without sources the mapping without them applies, and no attention is read
    plain = scorer.score(QUESTION, response=ANSWERS[0])
    assert plain.calibration_source != "given+context" and scorer.model.config._attn_implementation == attn
