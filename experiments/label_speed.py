"""How fast the offline teacher labels: answers per second, greedy answers and sample answers.

Labels the first ``--prompts`` prompts of a run's data folder (prompts.jsonl +
<backbone>/generations.jsonl) with a fresh `OfflineLabeller`, each prompt's greedy answer and
then up to ``--sample-answers`` of its samples read as answers (`label.sample_answers`), in
the order the label stage reads them, and prints seconds and answers per second.  The
labels' digest is printed too: ``--no-reuse`` (embeddings and sentence splits recomputed for
every answer, as the teacher did before it reused them) must print the same digest, slower.

    python experiments/label_speed.py data --prompts 40 --sample-answers 2
    python experiments/label_speed.py data --prompts 40 --sample-answers 2 --no-reuse
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from spanuq.config import load_config  # noqa: E402
from spanuq.pipeline.files import read_records  # noqa: E402
from spanuq.pipeline.records import Generation, Prompt  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("data", type=Path)
    ap.add_argument("--prompts", type=int, default=40)
    ap.add_argument("--sample-answers", type=int, default=2)
    ap.add_argument("--no-reuse", action="store_true", help="keep no embedding or sentence split between answers")
    args = ap.parse_args()

    import torch

    from spanuq.label.align import make_aligner
    from spanuq.label.offline import OfflineLabeller
    from spanuq.label.sample_answers import parent_id, sample_answers, sample_prompt

    cfg = load_config(REPO / "params.yaml")
    torch.set_num_threads(os.cpu_count() or 1)
    prompts = {p.id: p for p in read_records(args.data / "prompts.jsonl", Prompt)}
    gens = read_records(args.data / cfg.backbone.name / "generations.jsonl", Generation)[: args.prompts]
    lab = OfflineLabeller(cfg.label, make_aligner(cfg.label))
    if args.no_reuse:
        lab.sentences.size = lab.aligner.base.recent.size = 0
    lab.aligner.base.model.encode(["warm up"])
    seconds, counts, claims = {"greedy": 0.0, "sample": 0.0}, {"greedy": 0, "sample": 0}, []
    for g in gens:
        for kind, answer, prompt in [("greedy", g, prompts[g.prompt_id])] + [
                ("sample", a, sample_prompt(prompts[parent_id(a.prompt_id)], a.prompt_id))
                for a in sample_answers(g, args.sample_answers)]:
            t0 = time.perf_counter()
            res = lab.label(answer, prompt)
            seconds[kind] += time.perf_counter() - t0
            counts[kind] += 1
            claims.append([(c.id, c.support) for c in res.claims])
    digest = hashlib.sha256(json.dumps(claims).encode()).hexdigest()[:12]
    print(f"{'no reuse' if args.no_reuse else 'reuse'}: {len(gens)} prompts, {torch.get_num_threads()} threads")
    for kind in seconds:
        if counts[kind]:
            print(f"  {kind:7s} answers {counts[kind]:5d}  {seconds[kind]:7.1f} s  {counts[kind] / seconds[kind]:6.1f} answers/s")
    total = sum(seconds.values())
    print(f"  all     answers {sum(counts.values()):5d}  {total:7.1f} s  labels digest {digest}")


if __name__ == "__main__":
    main()
