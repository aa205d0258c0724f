"""The judge labeller: the paper's multi-sample distillation pipeline (App. D.2, Stages 2-4).

For one greedy answer with S samples:

1. decompose the greedy answer into atomic claims anchored to its characters
   (`decompose.decompose`; spans repaired by fuzzy matching or dropped; a claim
   list cut off at the judge's largest budget is redone sentence by sentence);
   a claim whose span only repeats the prompt is dropped;
2. decompose every sample into claims (texts only);
3. align: greedy claim k and sample claim c are equivalent when the aligner
   (NLI entailment, or embedding cosine gated by key-term agreement) scores
   them ≥ its threshold;
4. verify each sample claim that is equivalent to some greedy claim against
   the top-k BM25 passages of the corpus (`verify.verify_claims`), so claims no
   greedy span depends on cost nothing;
5. support_s(k) = max verdict score (supported 1, ambiguous 0.5, unsupported 0)
   over the claims of sample s equivalent to k, 0 when sample s makes no such
   claim — unless s was cut off by the token budget before the point where the
   greedy answer states k, then s abstains (`offline.vote`);
   u*_k = 1 − mean over voting samples of support_s(k)  (paper Eq. 11).

A transient judge failure (retries ran out, empty reply) raises
`TransientLabelError`: the answer is not labelled this run and not cached, so
the next run asks again (the judge's own cache keeps every answer it did get).
A sample whose decomposition failed for good (invalid JSON at temperature 0) is
left out of S for that answer; a claim whose verification failed for good is
left out for that sample (both counted in the stats).  `EndpointUnreachable`
propagates: the stage stops, with everything labelled so far cached.
"""
from __future__ import annotations

from ..config import LabelConfig
from ..pipeline.records import Claim, Generation, Prompt
from .align import Aligner
from .decompose import DECOMPOSE, DecomposeResult, Decomposition, anchor_claims, claim_texts
from .judge import Judge, JudgeFailure
from .offline import LabelResult, vote
from ..context.retrieval import BM25Retriever
from .terms import is_prompt_copy
from .verify import Verification, verify_claims

VERSION = 2


class TransientLabelError(RuntimeError):
    """The judge failed on this answer in a way that may pass (never cached as a label)."""


def _raise_transient(outs) -> None:
    bad = [o for o in outs if isinstance(o, JudgeFailure) and o.transient]
    if bad:
        raise TransientLabelError(f"{len(bad)} judge request(s) failed transiently: {bad[0]}")


class JudgeLabeller:
    name = "judge"
    version = VERSION

    def __init__(self, cfg: LabelConfig, judge: Judge, aligner: Aligner, retriever: BM25Retriever | None):
        self.cfg, self.judge, self.aligner, self.retriever = cfg, judge, aligner, retriever

    def label(self, gen: Generation, prompt: Prompt) -> LabelResult:
        answer = gen.greedy.text
        if not answer.strip():
            return LabelResult([], "empty")
        question = prompt.text
        # a row with sources is labelled from them alone (docs/labels.md): its samples are not decomposed
        texts = [answer] + ([s.text for s in gen.samples] if prompt.context is None else [])
        outs = self.judge.ask_many(DECOMPOSE, [{"question": question, "answer": t} for t in texts])
        _raise_transient(outs)
        stats = {"repaired": 0, "dropped": 0, "decompose_failures": 0, "decompose_by_sentence": 0,
                 "verify_failures": 0, "samples_skipped": 0, "prompt_copies": 0, "abstentions": 0}
        if isinstance(outs[0], JudgeFailure) and outs[0].kind == "truncated":
            dec = self._decompose_by_sentence(question, answer)
            stats["decompose_by_sentence"] = 1
        elif isinstance(outs[0], JudgeFailure):
            return LabelResult([], "error", f"decomposition failed: {outs[0]}", {**stats, "decompose_failures": 1})
        else:
            dec = anchor_claims(answer, outs[0], self.cfg.repair_min_score, self.cfg.min_span_chars,
                                self.cfg.max_spans)
        stats.update(repaired=dec.repaired, dropped=dec.dropped)
        own = [c for c in dec.claims if not is_prompt_copy(answer[c.start:c.end], question, self.cfg.term_min_score)]
        stats["prompt_copies"] = len(dec.claims) - len(own)
        if not own:
            return LabelResult([], "no_claims", stats=stats)
        if prompt.context is not None:
            return self._from_source(gen, prompt, own, stats)
        samples, sample_claims = [], []
        for sample, out in zip(gen.samples, outs[1:]):
            cl = claim_texts(out) if isinstance(out, Decomposition) else None
            if cl is None or sample.finish_reason == "error":
                stats["samples_skipped"] += 1
                stats["decompose_failures"] += cl is None
                continue
            samples.append(sample)
            sample_claims.append(cl)
        if not sample_claims:
            return LabelResult([], "error", "no sample could be decomposed", stats)

        greedy_texts = [c.text for c in own]
        flat = [(s, c) for s, cl in enumerate(sample_claims) for c in cl]
        scores = self.aligner.scores(greedy_texts, [c for _, c in flat], question) if flat else None
        equivalent = [[j for j in range(len(flat)) if scores[k, j] >= self.aligner.threshold]
                      for k in range(len(greedy_texts))]
        needed = sorted({j for eq in equivalent for j in eq})
        verdicts: dict[int, Verification | JudgeFailure] = {}
        if needed:
            results = verify_claims(self.judge, self.retriever, [flat[j][1] for j in needed], self.cfg.retrieval_top_k)
            _raise_transient(results)
            verdicts = dict(zip(needed, results))
            stats["verify_failures"] = sum(isinstance(v, JudgeFailure) for v in results)

        claims = []
        for k, c in enumerate(own):
            support: list[float] = []
            voters = []
            evidence: list[str] = []
            for s in range(len(sample_claims)):
                mine = [verdicts[j] for j in equivalent[k] if flat[j][0] == s]
                ok = [v for v in mine if isinstance(v, Verification)]
                if mine and not ok:  # every equivalent claim's verification failed: unknown
                    continue
                support.append(max((v.score for v in ok), default=0.0))
                voters.append(samples[s])
                for v in ok:
                    evidence.extend(v.evidence)
            votes, abstained = vote(support, voters, c.start)
            stats["abstentions"] += abstained
            if not votes:
                continue
            claims.append(Claim(id=f"{gen.prompt_id}:{k}", prompt_id=gen.prompt_id, text=c.text, start=c.start,
                                end=c.end, support=votes, evidence=sorted(set(evidence)), repaired=c.repaired))
        return LabelResult(claims, "ok" if claims else "no_claims", stats=stats)

    def _from_source(self, gen: Generation, prompt: Prompt, own: list, stats: dict) -> LabelResult:
        """An answer given with sources: each claim's one vote is the judge's verdict against the row's
        passages (supported 1, unsupported 0, ambiguous 0.5); a claim whose verification failed is left out."""
        from ..context.passages import as_passages
        from .verify import verify_against

        passages = as_passages(prompt.context, 10**9, 10**6)  # checked by the prompts stage
        results = verify_against(self.judge, [c.text for c in own], passages)
        _raise_transient(results)
        stats["verify_failures"] = sum(isinstance(v, JudgeFailure) for v in results)
        claims = [Claim(id=f"{gen.prompt_id}:{k}", prompt_id=gen.prompt_id, text=c.text, start=c.start, end=c.end,
                        support=[v.score], evidence=["source:" + v.verdict, *v.evidence], repaired=c.repaired)
                  for k, (c, v) in enumerate(zip(own, results)) if isinstance(v, Verification)]
        return LabelResult(claims, "ok" if claims else "no_claims", stats=stats)

    def _decompose_by_sentence(self, question: str, answer: str) -> DecomposeResult:
        """Decompose each sentence on its own (the whole claim list did not fit the budget)
        and anchor the claims in the whole answer."""
        from .offline import split_sentences
        from .units import load_spacy

        sentences = split_sentences(load_spacy(self.cfg.spacy_model), [answer])[0]
        outs = self.judge.ask_many(DECOMPOSE, [{"question": question, "answer": s} for s in sentences])
        _raise_transient(outs)
        merged = Decomposition(claims=[c for o in outs if isinstance(o, Decomposition) for c in o.claims])
        res = anchor_claims(answer, merged, self.cfg.repair_min_score, self.cfg.min_span_chars, self.cfg.max_spans)
        res.dropped += sum(isinstance(o, JudgeFailure) for o in outs)
        return res
