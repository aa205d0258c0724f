"""``prompts.source: hub``: the paper's five domains from the Hugging Face hub (App. D.1).

=============  ==========================================  ==================================
domain         dataset (``prompts.hub.<domain>``)          prompt / references
=============  ==========================================  ==================================
longform_qa    ``google-research-datasets/nq_open``        ``question`` / ``answer`` (list)
triviaqa       ``mandarjoshi/trivia_qa`` unfiltered.nocontext  ``question`` / ``answer.value`` +
                                                            ``answer.aliases``
eli5           ``sentence-transformers/eli5`` (pair)       ``question`` (the post title) / none
biography      people in ``akariasai/PopQA`` (or a file)   FActScore templates / occupation,
                                                            birthplace, parents, sport
felm           ``hkust-nlp/felm`` 53% + ``truthfulqa/       ``prompt`` / none;
               truthful_qa`` 45% + ``pminervini/HaluEval``  ``best_answer`` + ``correct_answers``;
               2%                                           ``right_answer``
=============  ==========================================  ==================================

Biographies follow FActScore: entities stratified by monthly Wikipedia page views
(head > 100K, torso 10K-100K, tail < 10K; mixed 30/40/30) and the three templates
"Write a biography of X." / "Tell me a bio of X." / "Tell me about X." used in turn.
The entity source is PopQA, whose rows carry the subject's monthly page views
(``s_pop``); its people are the subjects of the occupation, place of birth, father,
mother and sport relations, and the objects of those rows become the key facts a
correct biography mentions.  ``prompts.hub.biography_entities`` replaces it with a
file of names (``name`` [, ``popularity``: head|torso|tail or monthly views,
``references``]).

Each loader takes an iterable of raw rows (dicts, as ``datasets`` yields them) and
returns prompts, so tests feed them fixture rows; only :func:`load_rows` touches the
network, and it explains what to do when the hub is unreachable.
"""
from __future__ import annotations

import ast
import hashlib
import json
import logging
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

from ..config import HubDatasetConfig, HubSourcesConfig, PromptsConfig
from ..pipeline.files import read_user_text
from ..pipeline.records import Prompt
from .mix import hash_order, interleave, mix, stratified_order

log = logging.getLogger(__name__)

BIO_TEMPLATES = ("Write a biography of {}.", "Tell me a bio of {}.", "Tell me about {}.")
POPQA_PERSON_RELATIONS = ("occupation", "place of birth", "father", "mother", "sport")
TRUTHFULQA_NON_ANSWERS = {"i have no comment", "i have no comment."}
MAX_REFERENCES = 10
OFFLINE_HINT = ("If the hub is unreachable (offline machine, firewall), use prompts.source=bundled "
                "(the offline set shipped with SpanUQ) or prompts.source=file with "
                "prompts.file=<your .jsonl or .csv>.")


def _hid(prefix: str, text: str) -> str:
    return f"{prefix}-{hashlib.sha1(text.encode('utf-8')).hexdigest()[:12]}"


def _dedupe(items: Iterable[str], limit: int = MAX_REFERENCES) -> list[str]:
    out, seen = [], set()
    for s in items:
        s = (s or "").strip() if isinstance(s, str) else str(s)
        if s and s.lower() not in seen:
            seen.add(s.lower())
            out.append(s)
        if len(out) >= limit:
            break
    return out


def _as_list(value: Any) -> list[str]:
    """A list of strings from a list, a JSON/Python list literal in a string, or a plain string."""
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return [str(v) for v in value if v is not None]
    if isinstance(value, str):
        s = value.strip()
        if s.startswith("["):
            for parse in (json.loads, ast.literal_eval):
                try:
                    got = parse(s)
                    if isinstance(got, list):
                        return [str(v) for v in got]
                except (ValueError, SyntaxError):
                    pass
        return [s] if s else []
    return [str(value)]


def _unique(prompts: Iterable[Prompt]) -> list[Prompt]:
    out, seen = [], set()
    for p in prompts:
        if p.id not in seen:
            seen.add(p.id)
            out.append(p)
    return out


def as_question(text: str) -> str:
    """NQ-Open questions are lower-case search queries: capitalise and end with '?'."""
    text = re.sub(r"\s+", " ", text).strip()
    if not text:
        return text
    text = text[0].upper() + text[1:]
    return text if text.endswith("?") else text + "?"


# ------------------------------------------------------------------ loaders (rows -> prompts)
def nq_open_prompts(rows: Iterable[dict]) -> list[Prompt]:
    """NQ-Open rows ``{question, answer: [..]}`` -> long-form QA prompts."""
    out = []
    for r in rows:
        q = as_question(r.get("question") or "")
        if not q:
            continue
        out.append(Prompt(id=_hid("nq", q.lower()), domain="longform_qa", text=q,
                          references=_dedupe(_as_list(r.get("answer"))), meta={"source": "nq_open"}))
    return _unique(out)


def triviaqa_prompts(rows: Iterable[dict]) -> list[Prompt]:
    """TriviaQA rows ``{question, question_id, answer: {value, aliases, ...}}`` -> trivia prompts."""
    out = []
    for r in rows:
        q = (r.get("question") or "").strip()
        if not q:
            continue
        ans = r.get("answer") or {}
        value = ans.get("value") or ""
        refs = _dedupe([value, *(ans.get("aliases") or [])]) if value and value != "<unk>" else []
        qid = r.get("question_id") or _hid("q", q)[2:]
        meta = {"source": "trivia_qa"}
        if ans.get("type"):
            meta["answer_type"] = str(ans["type"])
        out.append(Prompt(id=f"triviaqa-{qid}", domain="triviaqa", text=q, references=refs, meta=meta))
    return _unique(out)


_ELI5_PREFIX = re.compile(r"^\s*(\[?eli5\]?\s*[:\-–—]?\s*)", re.IGNORECASE)


def eli5_prompts(rows: Iterable[dict], max_chars: int = 300) -> list[Prompt]:
    """ELI5 rows -> explanatory prompts from the question title (``question``, or ``title``
    in the original layout); no references (the answers are Reddit posts, not facts)."""
    out = []
    for r in rows:
        q = r.get("question") if r.get("question") is not None else r.get("title")
        q = _ELI5_PREFIX.sub("", re.sub(r"\s+", " ", q or "")).strip()
        if len(q) < 10 or len(q) > max_chars or "http" in q.lower() or q.lower() in ("[removed]", "[deleted]"):
            continue
        q = q[0].upper() + q[1:]
        meta = {"source": "eli5"}
        if r.get("q_id"):
            meta["q_id"] = str(r["q_id"])
        out.append(Prompt(id=_hid("eli5", q.lower()), domain="eli5", text=q, references=[], meta=meta))
    return _unique(out)


def felm_prompts(rows: Iterable[dict], config: str) -> list[Prompt]:
    """FELM rows ``{index, source, prompt, response, segmented_response, labels, ref, ...}``
    of one config (wk, science, math, reasoning, writing_rec) -> felm prompts.
    FELM annotates a ChatGPT response, not reference answers: no references."""
    out = []
    for r in rows:
        q = (r.get("prompt") or "").strip()
        if not q:
            continue
        idx = r.get("index")
        pid = f"felm-{config}-{idx}" if idx is not None else _hid(f"felm-{config}", q)
        meta = {"source": "felm", "kind": config}
        if r.get("source"):
            meta["origin"] = str(r["source"])
        out.append(Prompt(id=pid, domain="felm", text=q, references=[], meta=meta))
    return _unique(out)


def truthfulqa_prompts(rows: Iterable[dict]) -> list[Prompt]:
    """TruthfulQA generation rows ``{question, best_answer, correct_answers, category, ...}``."""
    out = []
    for r in rows:
        q = (r.get("question") or "").strip()
        if not q:
            continue
        refs = [a for a in [r.get("best_answer") or "", *(r.get("correct_answers") or [])]
                if a.strip().lower() not in TRUTHFULQA_NON_ANSWERS]
        meta = {"source": "truthfulqa", "kind": "misconception"}
        if r.get("category"):
            meta["category"] = str(r["category"])
        out.append(Prompt(id=_hid("truthfulqa", q), domain="felm", text=q, references=_dedupe(refs), meta=meta))
    return _unique(out)


def halueval_prompts(rows: Iterable[dict]) -> list[Prompt]:
    """HaluEval qa rows ``{knowledge, question, right_answer, hallucinated_answer}`` (or the
    ``qa_samples`` layout ``{question, answer, hallucination}``) -> felm prompts."""
    out = []
    for r in rows:
        q = (r.get("question") or "").strip()
        if not q:
            continue
        if r.get("right_answer"):
            refs = [r["right_answer"]]
        elif str(r.get("hallucination", "")).lower() == "no" and r.get("answer"):
            refs = [r["answer"]]
        else:
            refs = []
        out.append(Prompt(id=_hid("halueval", q), domain="felm", text=q, references=_dedupe(refs),
                          meta={"source": "halueval", "kind": "multihop"}))
    return _unique(out)


# ------------------------------------------------------------------ biographies
@dataclass
class Entity:
    """A person to write a biography of, with a popularity stratum and key facts."""

    name: str
    popularity: str  # head | torso | tail
    references: list[str] = field(default_factory=list)
    meta: dict[str, str] = field(default_factory=dict)
    key: str = ""  # a stable identity (Wikidata id when known)

    @property
    def id(self) -> str:
        return self.key or self.name


def popularity_stratum(views: float, thresholds: dict[str, int]) -> str:
    """head > thresholds['head'] monthly views, tail < thresholds['torso'], else torso."""
    if views > thresholds.get("head", 100_000):
        return "head"
    if views < thresholds.get("torso", 10_000):
        return "tail"
    return "torso"


def popqa_entities(rows: Iterable[dict], thresholds: dict[str, int] | None = None) -> list[Entity]:
    """People in PopQA rows ``{subj, subj_id, prop, obj, possible_answers, s_pop, s_wiki_title, ...}``.

    Subjects of the person relations (occupation, place of birth, father, mother, sport)
    become entities; ``s_pop`` (monthly page views) gives the stratum, and the answers of
    each entity's rows are its key facts.
    """
    thresholds = thresholds or {"head": 100_000, "torso": 10_000}
    people: dict[str, Entity] = {}
    for r in rows:
        if r.get("prop") not in POPQA_PERSON_RELATIONS or not (r.get("subj") or "").strip():
            continue
        key = str(r.get("subj_id") or r.get("s_uri") or r["subj"])
        views = float(r.get("s_pop") or 0)
        e = people.get(key)
        if e is None:
            e = people[key] = Entity(
                name=r["subj"].strip(), popularity=popularity_stratum(views, thresholds), key=f"popqa-{key}",
                meta={"source": "popqa", "monthly_views": str(int(views)),
                      "wiki_title": str(r.get("s_wiki_title") or r["subj"])})
        answers = _as_list(r.get("possible_answers")) or _as_list(r.get("obj"))
        facts = answers[:3] if r.get("prop") == "occupation" else answers[:1]
        e.references = _dedupe([*e.references, *facts])
    return list(people.values())


def entities_from_file(path: str | Path, thresholds: dict[str, int] | None = None) -> list[Entity]:
    """Entities from a JSONL/CSV file: ``name`` (or ``entity``), optional ``popularity``
    (head|torso|tail, or monthly page views) and ``references`` (list or ``a|b``)."""
    import csv

    thresholds = thresholds or {"head": 100_000, "torso": 10_000}
    path = Path(path)
    text = read_user_text(path, "biography entities file")
    if path.suffix.lower() in (".csv", ".tsv"):
        import io

        rows = list(enumerate(csv.DictReader(io.StringIO(text), delimiter="\t" if path.suffix == ".tsv" else ","), 2))
    else:
        rows = []
        for n, line in enumerate(text.splitlines(), 1):
            if line.strip():
                try:
                    rows.append((n, json.loads(line)))
                except json.JSONDecodeError as e:
                    raise ValueError(f"{path}:{n}: not valid JSON ({e.msg})") from None
    out = []
    for n, r in rows:
        name = (r.get("name") or r.get("entity") or "").strip()
        if not name:
            raise ValueError(f"{path}:{n}: missing `name`")
        pop = str(r.get("popularity") or "").strip().lower()
        if pop in ("head", "torso", "tail"):
            stratum = pop
        elif pop:
            try:
                stratum = popularity_stratum(float(pop), thresholds)
            except ValueError:
                raise ValueError(f"{path}:{n}: popularity {pop!r} is not head, torso, tail or a number of "
                                 f"monthly page views") from None
        else:
            stratum = "unknown"
        refs = r.get("references")
        refs = [s.strip() for s in refs.split("|")] if isinstance(refs, str) else _as_list(refs)
        out.append(Entity(name=name, popularity=stratum, references=_dedupe(refs), key=f"entity-{name}",
                          meta={"source": "file"}))
    return out


def biography_prompts(entities: list[Entity], seed: int,
                      popularity_weights: dict[str, float] | None = None) -> list[Prompt]:
    """Entities in selection order (popularity strata interleaved by ``popularity_weights``,
    default 30/40/30) as FActScore prompts, the three templates used in turn."""
    weights = popularity_weights or {"head": 0.3, "torso": 0.4, "tail": 0.3}
    ordered = stratified_order(entities, seed, lambda e: e.popularity, weights)
    out = []
    for i, e in enumerate(ordered):
        slug = re.sub(r"[^a-z0-9]+", "-", e.name.lower()).strip("-")[:40] or "x"
        out.append(Prompt(id=f"bio-{slug}-{hashlib.sha1(e.id.encode()).hexdigest()[:6]}", domain="biography",
                          text=BIO_TEMPLATES[i % 3].format(e.name), references=list(e.references),
                          meta={**e.meta, "entity": e.name, "popularity": e.popularity,
                                "template": str(i % 3)}))
    return _unique(out)


# ------------------------------------------------------------------ the mixer
def mix_felm(pools: dict[str, list[Prompt]], weights: dict[str, float], seed: int) -> list[Prompt]:
    """The felm domain: FELM / TruthfulQA / HaluEval interleaved by ``weights`` (53/45/2);
    inside FELM the five kinds in proportion to their sizes."""
    ordered = {}
    for name, prompts in pools.items():
        ordered[name] = (stratified_order(prompts, seed, lambda p: p.meta.get("kind", ""))
                         if name == "felm" else hash_order(prompts, seed))
    names = [k for k in weights if k in ordered] + [k for k in ordered if k not in weights]
    return interleave({k: ordered[k] for k in names}, weights)


def mix_domains(pools: dict[str, list[Prompt]], proportions: dict[str, float], n: int, seed: int,
                preordered: tuple[str, ...] = ("biography", "felm")) -> list[Prompt]:
    """``n`` prompts from per-domain pools by ``proportions``; pools not in ``preordered`` are
    hash-ordered by ``seed`` first. A short domain is filled from the others."""
    ordered = {d: (ps if d in preordered else hash_order(ps, seed)) for d, ps in pools.items()}
    return mix(ordered, {d: w for d, w in proportions.items() if w > 0}, n)


# ------------------------------------------------------------------ the network
def load_rows(ds: HubDatasetConfig, cache_dir: str | None = None, name: str | None = None,
              progress: bool = True) -> Iterable[dict]:
    """``datasets.load_dataset`` for one dataset config; a clear error when it cannot."""
    what = f"{ds.path}" + (f" ({name or ds.name})" if (name or ds.name) else "") + f", split {ds.split}"
    try:
        import datasets
    except ImportError as e:  # pragma: no cover - a core dependency
        raise RuntimeError(f"prompts.source=hub needs the `datasets` package (pip install datasets). "
                           f"{OFFLINE_HINT}") from e
    if not progress:
        datasets.disable_progress_bars()
    try:
        return datasets.load_dataset(ds.path, name or ds.name, split=ds.split, revision=ds.revision,
                                     cache_dir=cache_dir)
    except Exception as e:
        msg = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        raise RuntimeError(f"cannot load {what} from the Hugging Face hub ({type(e).__name__}: {msg}). "
                           f"{OFFLINE_HINT}") from e


def load_hub_prompts(pcfg: PromptsConfig, n: int, progress: bool = True) -> list[Prompt]:
    """``n`` prompts from the paper's datasets, mixed by ``pcfg.proportions``."""
    hub: HubSourcesConfig = pcfg.hub
    seed = pcfg.seed
    want = {d for d, w in pcfg.proportions.items() if w > 0}
    pools: dict[str, list[Prompt]] = {}

    def rows(ds: HubDatasetConfig, name: str | None = None) -> Iterable[dict]:
        log.info("prompts: loading %s %s", ds.path, name or ds.name or "")
        return load_rows(ds, hub.cache_dir, name=name, progress=progress)

    if "longform_qa" in want:
        pools["longform_qa"] = nq_open_prompts(rows(hub.longform_qa))
    if "triviaqa" in want:
        pools["triviaqa"] = triviaqa_prompts(rows(hub.triviaqa))
    if "eli5" in want:
        pools["eli5"] = eli5_prompts(rows(hub.eli5))
    if "biography" in want:
        ents = (entities_from_file(hub.biography_entities, hub.popularity_thresholds) if hub.biography_entities
                else popqa_entities(rows(hub.biography), hub.popularity_thresholds))
        pools["biography"] = biography_prompts(ents, seed, hub.biography_popularity)
    if "felm" in want:
        parts: dict[str, list[Prompt]] = {}
        if hub.felm_mix.get("felm", 0) > 0:
            parts["felm"] = [p for c in hub.felm_configs for p in felm_prompts(rows(hub.felm, c), c)]
        if hub.felm_mix.get("truthfulqa", 0) > 0:
            parts["truthfulqa"] = truthfulqa_prompts(rows(hub.truthfulqa))
        if hub.felm_mix.get("halueval", 0) > 0:
            parts["halueval"] = halueval_prompts(rows(hub.halueval))
        pools["felm"] = mix_felm(parts, hub.felm_mix, seed)
    chosen = mix_domains(pools, pcfg.proportions, n, seed)
    log.info("prompts: %d hub prompts from pools %s", len(chosen), {d: len(p) for d, p in pools.items()})
    return chosen
