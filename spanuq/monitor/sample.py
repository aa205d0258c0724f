"""A sample answers file for `spanuq monitor`, from data spanuq ships (nothing scored here):

    python -m spanuq.monitor.sample answers.jsonl      # 526 rows: try `spanuq monitor answers.jsonl`

* the shipped probe's labelled test answers (SmolLM2's own generations), ``source=generated``
  and ``answer_source: generated`` (scored as the backbone's own answers, as the API would);
* templated answers to the bundled prompts: the prompt's reference (``variant=reference``) or
  the reference of another prompt of the same domain (``variant=other reference``), ``source=templated``.

The tests and `benchmarks/bench_monitor.py` use it.
"""
from __future__ import annotations

import json
import random
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1]
SPLIT = PACKAGE / "probes" / "smollm2-135m" / "test_split.jsonl"
BUNDLED = PACKAGE / "data" / "bundled" / "prompts.jsonl"
TEMPLATES = ["The answer is {}.", "It is {}.", "{} is the answer to that.", "That would be {}, as far as I know."]


def generated_rows() -> list[dict]:
    out = []
    for line in SPLIT.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        out.append({"id": r["prompt_id"], "prompt": r["prompt"], "response": r["response"], "domain": r["domain"],
                    "answer_source": "generated", "metadata": {"source": "generated"}})
    return out


def templated_rows(n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    prompts = [json.loads(x) for x in BUNDLED.read_text(encoding="utf-8").splitlines()]
    prompts = [p for p in prompts if p.get("references")]
    by_domain: dict[str, list] = {}
    for p in prompts:
        by_domain.setdefault(p["domain"], []).append(p)
    out = []
    for k, p in enumerate(rng.sample(prompts, n)):
        other = k % 2 == 1
        refs = rng.choice([q for q in by_domain[p["domain"]] if q["id"] != p["id"]])["references"] if other \
            else p["references"]
        out.append({"id": f"{p['id']}-t{k}", "prompt": p["text"], "domain": p["domain"],
                    "response": rng.choice(TEMPLATES).format(refs[0]),
                    "metadata": {"source": "templated", "variant": "other reference" if other else "reference"}})
    return out


def write_answers(path: Path, n_generated: int | None = None, n_templated: int = 260, extra: list | None = None) -> int:
    """Write the rows (and ``extra`` raw lines, bytes or dicts) to ``path``; returns the number of lines."""
    rows = generated_rows()[:n_generated] + templated_rows(n_templated)
    with path.open("wb") as f:
        for r in rows:
            f.write((json.dumps(r, ensure_ascii=False) + "\n").encode("utf-8"))
        for x in extra or []:
            f.write(x if isinstance(x, bytes) else (json.dumps(x, ensure_ascii=False) + "\n").encode("utf-8"))
    return len(rows) + len(extra or [])


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 2:
        sys.exit("usage: python -m spanuq.monitor.sample OUT.jsonl")
    print(f"wrote {write_answers(Path(sys.argv[1]))} rows to {sys.argv[1]}")
