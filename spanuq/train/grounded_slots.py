"""Grounded training data: slots of answers read with their sources, labelled by the source.

The grounded pairs (`spanuq.bench.grounded`; the training file ``spanuq/label/grounded/pairs.jsonl``,
built from subjects and wording no bench uses) each give two answers that differ in one fact,
read against one source. The label of a slot comes from the source, never from what the backbone
knows:

    u* = 0  the right value, where the source states it (cases a, b, c — c in other words)
    u* = 1  the wrong value (every case), and the right value where the source is silent (case d:
            the source does not support it)

`slot_readings` reads every twin as the product reads an answer with sources: the backbone's
input is the rendered chat (`spanuq.context.chat.question_chat`, the one rendering, as the bench's
`spanuq.bench.grounded_run.source_chat`), one teacher-forced pass gives the probe's states and each token's
surprisal s_t and entropy e_t, and the product's own post-processing (`SpanUQ.score_many` with
those states, each name, date and number a span of its own) gives the shown spans with raw û. A
slot's reading is the span over it (the planted bench's rule, `slot_score`): its raw û, and
(S, H₀) = (Σ s_t over the span, e at its first token; a person named in full read by the surname too,
`spanuq.score.names`) — the terms the given-answer mapping reads
(`spanuq.model.calibration`), now read after the sources — and, from the same pass, the mean over
the span of each attention head's lookback ratio on the sources (`spanuq.llm.lookback`), what the
``lookback`` variant of the with-sources calibration reads.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..bench.grounded import GroundedPair
from ..model.calibration import span_surprisal


@dataclass(frozen=True)
class SlotReading:
    pair: str
    group: str
    case: str
    kind: str
    twin: str  # correct | planted
    label: float  # u*: 1 = contradicted or unsupported by the source
    u_raw: float  # the probe's raw û of the span over the slot (û_seq when no span covers it)
    surprisal: float  # S: Σ of the span's token surprisal, after the sources
    entropy: float  # H₀: the entropy at the span's first token
    covered: bool  # a shown span covers the slot (IoU ≥ COVER_IOU)
    lookback: tuple[float, ...] | None = None  # each head's lookback ratio, mean over the span (the slot's tokens
    # when no span covers it); None in readings made before it was read


def label(pair: GroundedPair, twin: str) -> float:
    """u* of a twin's slot (module docstring)."""
    return 1.0 if twin == "planted" or pair.case == "d" else 0.0


def slot_of(uq, result, twin, feature) -> tuple[float, tuple[float, float], tuple[int, int], float]:
    """The reading of ``twin``'s slot in its scored ``result``: (raw û, (S, H₀), its tokens [b, e], the IoU of the
    span covering it).  The span overlapping the slot most gives û and S, H₀; a slot no span covers reads the
    answer's û_seq, no surprisal, and the tokens its characters fall on."""
    from ..model.span_ops import char_iou
    from ..llm.loading import token_offsets

    best, span = 0.0, None
    for s in result.spans:
        iou = char_iou((s.start, s.end), twin.slot)
        if iou > best:
            best, span = iou, s
    if span is None:
        offsets = token_offsets(uq.tok, twin.text)[1]
        toks = [j for j, (a, b) in enumerate(offsets) if a < twin.slot[1] and b > twin.slot[0]]
        return float(result.u_seq), (0.0, 0.0), (toks[0], toks[-1]), best
    b, e = span.b, span.e
    sh = span_surprisal(feature.surprisal.float().numpy(), feature.entropy.float().numpy(), [(b, e)])[0]
    return float(span.u_raw), (float(sh[0]), float(sh[1])), (b, e), best


def slot_readings(uq, pairs: list[GroundedPair], batch_size: int = 8, progress: bool = False) -> list[SlotReading]:
    """Every twin's slot read with its sources (module docstring), correct then planted per pair;
    a twin the scorer could not read raises (training data is never silently thinner)."""
    from ..bench.planted_run import COVER_IOU
    from ..context.chat import question_chat
    from ..llm.loading import token_offsets
    from ..llm.lookback import extract_with_lookback, source_positions, span_lookback
    from ..label.units import load_spacy
    from ..score.names import read_names

    twins = [(p, name, t) for p in pairs for name, t in (("correct", p.correct), ("planted", p.planted))]
    rendered = [question_chat(uq.tok, p.prompt, p.context, uq.system_prompt) for p, _, _ in twins]
    chats = [r.chat for r in rendered]
    sources = [source_positions(uq.tok, r.chat, r.read) for r in rendered]
    ids = [token_offsets(uq.tok, t.text)[0] for _, _, t in twins]
    feats = []
    for s in range(0, len(twins), batch_size):
        feats += extract_with_lookback(uq.model, uq.tok, chats[s: s + batch_size], ids[s: s + batch_size],
                                       uq.layers, sources[s: s + batch_size], uq.out_dtype)
    nlp = load_spacy(uq.cfg.label.spacy_model)
    for (p, _, t), f, chat in zip(twins, feats, chats):  # full names read by the surname too, as the product does
        s = read_names(nlp, t.text, token_offsets(uq.tok, t.text)[1], f.surprisal.float().numpy(), p.context,
                       lambda piece: uq.surprisal_after(chat, piece))
        f.surprisal = torch.from_numpy(s).to(f.surprisal.dtype)
    kept = uq.calibration
    # the identity mapping with facts as spans of their own: raw û of the spans the product shows
    uq.calibration = replace(kept.raw(), given={"fact_spans": True})
    try:
        results = uq.score_many([{"prompt": p.prompt, "response": t.text} for p, _, t in twins], progress=progress,
                                return_errors=True, states=feats, chats=chats)
    finally:
        uq.calibration = kept
    out = []
    for (p, name, t), f, r in zip(twins, feats, results):
        if isinstance(r, Exception):
            raise RuntimeError(f"{p.id} ({name}): {r}")
        u, sh, (b, e), best = slot_of(uq, r, t, f)
        lb = tuple(round(float(x), 6) for x in span_lookback(f.lookback.numpy(), [(b, e)])[0])
        out.append(SlotReading(p.id, p.group, p.case, p.kind, name, label(p, name), u, float(sh[0]), float(sh[1]),
                               best >= COVER_IOU, lb))
    return out
