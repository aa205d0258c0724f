"""The judge labeller: the paper's multi-sample distillation pipeline (App. D.2, Stages 2-4).

For one greedy answer with S samples:

1. decompose the greedy answer into atomic claims anchored to its characters
   (`decompose.decompose`; spans repaired by fuzzy matching or dropped);
2. decompose every sample into claims (texts only);
3. align: greedy claim k and sample claim c are equivalent when the aligner
   (NLI entailment or embedding cosine) scores them ≥ its threshold;
4. verify each sample claim that is equivalent to some greedy claim against
   the top-k BM25 passages of the corpus (`verify.verify_claims`), so claims no
   greedy span depends on cost nothing;
5. support_s(k) = max verdict score (supported 1, ambiguous 0.5, unsupported 0)
   over the claims of sample s equivalent to k, 0 when sample s makes no such
   claim; u*_k = 1 − mean_s support_s(k)  (paper Eq. 11).

A sample whose decomposition failed is left out of S for that answer; a claim
whose verification failed is left out for that sample (both counted in the
stats).  `EndpointUnreachable` propagates: the stage stops, with everything
labelled so far cached.
"""
from __future__ import annotations

from ..config import LabelConfig
from ..records import Claim, Generation, Prompt
from .align import Aligner
from .decompose import DECOMPOSE, Decomposition, anchor_claims, claim_texts
from .judge import Judge, JudgeFailure
from .offline import LabelResult
from .retrieval import BM25Retriever
from .verify import Verification, verify_claims

VERSION = 1


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
        texts = [answer] + [s.text for s in gen.samples]
        outs = self.judge.ask_many(DECOMPOSE, [{"question": question, "answer": t} for t in texts])
        if isinstance(outs[0], JudgeFailure):
            return LabelResult([], "error", f"decomposition failed: {outs[0]}", {"decompose_failures": 1})
        dec = anchor_claims(answer, outs[0], self.cfg.repair_min_score, self.cfg.min_span_chars, self.cfg.max_spans)
        stats = {"repaired": dec.repaired, "dropped": dec.dropped, "decompose_failures": 0,
                 "verify_failures": 0, "samples_skipped": 0}
        if not dec.claims:
            return LabelResult([], "no_claims", stats=stats)
        sample_claims: list[list[str]] = []
        for s, (sample, out) in enumerate(zip(gen.samples, outs[1:])):
            cl = claim_texts(out) if isinstance(out, Decomposition) else None
            if cl is None or sample.finish_reason == "error":
                stats["samples_skipped"] += 1
                stats["decompose_failures"] += cl is None
                continue
            sample_claims.append(cl)
        if not sample_claims:
            return LabelResult([], "error", "no sample could be decomposed", stats)

        greedy_texts = [c.text for c in dec.claims]
        flat = [(s, c) for s, cl in enumerate(sample_claims) for c in cl]
        scores = self.aligner.scores(greedy_texts, [c for _, c in flat]) if flat else None
        equivalent = [[j for j in range(len(flat)) if scores[k, j] >= self.aligner.threshold]
                      for k in range(len(greedy_texts))]
        needed = sorted({j for eq in equivalent for j in eq})
        verdicts: dict[int, Verification | JudgeFailure] = {}
        if needed:
            results = verify_claims(self.judge, self.retriever, [flat[j][1] for j in needed], self.cfg.retrieval_top_k)
            verdicts = dict(zip(needed, results))
            stats["verify_failures"] = sum(isinstance(v, JudgeFailure) for v in results)

        claims = []
        for k, c in enumerate(dec.claims):
            support: list[float] = []
            evidence: list[str] = []
            for s in range(len(sample_claims)):
                mine = [verdicts[j] for j in equivalent[k] if flat[j][0] == s]
                ok = [v for v in mine if isinstance(v, Verification)]
                if mine and not ok:  # every equivalent claim's verification failed: unknown
                    continue
                support.append(max((v.score for v in ok), default=0.0))
                for v in ok:
                    evidence.extend(v.evidence)
            if not support:
                continue
            claims.append(Claim(id=f"{gen.prompt_id}:{k}", prompt_id=gen.prompt_id, text=c.text, start=c.start,
                                end=c.end, support=support, evidence=sorted(set(evidence)), repaired=c.repaired))
        return LabelResult(claims, "ok" if claims else "no_claims", stats=stats)
