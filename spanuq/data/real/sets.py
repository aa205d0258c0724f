"""Each imported set's raw files → `RealItem`s (one reader per set, one record for all).

* **wice** — a claim is the answer to "Tell me about <its Wikipedia article's title>.", the web article it cites
  the one source (its sentences, one a line),
  ``marks`` the claim tokens people marked as not supported by it (``non_supported_spans``), the upstream
  split kept (by Wikipedia article); ``meta.supporting``: the characters of the sentences people cited.
* **xquad** — one item per question: its paragraph the source, the gold answers ``references``, no answer
  (the backbone's own answers and same-passage swaps are built from these: `spanuq.data.real.swaps`).
* **summedits** — an edited summary is the answer to "Summarise this <kind of document>.", its document the
  source; ``label`` from the set's 0/1;
  ``marks`` the summary's words a word diff with the seed summary finds changed, on inconsistent edits
  (a consistent edit's changed words are in ``meta.edited``: a paraphrase the source backs).
"""
from __future__ import annotations

import difflib
import hashlib
import json
import re

from .records import RealItem

_WORD = re.compile(r"\S+")
# The question each item is read after (the product reads every answer after one): a WiCE claim is a sentence of
# the Wikipedia article on its topic; a SummEdits summary answers a request to summarise its document.
TOPIC_PROMPT = "Tell me about {}."
SUMMARY_PROMPT = "Summarise this {}."
DOMAINS = {"news": "news article", "podcast": "podcast transcript", "qmsumm": "meeting transcript",
           "ectsum": "earnings call transcript", "sales_call": "sales call transcript", "sales_email": "sales email",
           "samsum": "chat conversation", "scitldr": "scientific paper"}


def article_split(set_name: str, article: str, shares: dict[str, int]) -> str:
    """The split of an article: a stable hash of (set, article) into ``shares`` (percent, train/dev/test)."""
    h = int(hashlib.sha1(f"{set_name}:{article}".encode()).hexdigest()[:8], 16) % 100
    return "train" if h < shares["train"] else "dev" if h < shares["train"] + shares["dev"] else "test"


def token_offsets_in(text: str, tokens: list[str]) -> list[tuple[int, int]]:
    """Where each of ``tokens`` stands in ``text``, in order (a token not found takes the empty span where the
    search stands)."""
    out, at = [], 0
    for t in tokens:
        i = text.find(t, at)
        if i < 0:
            out.append((at, at))
            continue
        out.append((i, i + len(t)))
        at = i + len(t)
    return out


def runs(offsets: list[tuple[int, int]], flags: list[bool]) -> list[tuple[int, int]]:
    """The character spans of consecutive flagged tokens, one span a run (the gaps inside a run included)."""
    out: list[tuple[int, int]] = []
    prev = False
    for (s, e), f in zip(offsets, flags):
        if f and e > s:
            if prev:
                out[-1] = (out[-1][0], e)
            else:
                out.append((s, e))
        prev = bool(f and e > s)
    return out


def wice(files: dict[str, bytes], shares: dict[str, int]) -> list[RealItem]:
    items = []
    for path, raw in sorted(files.items()):
        split = path.rsplit("/", 1)[-1].split(".")[0]
        for n, line in enumerate(raw.decode("utf-8").splitlines()):
            if not line.strip():
                continue
            r = json.loads(line)
            claim, evidence = r["claim"], [e for e in r["evidence"]]
            text, starts = "", []
            for e in evidence:
                starts.append(len(text))
                text += e + "\n"
            text = text.rstrip("\n")
            supporting = sorted({i for group in r.get("supporting_sentences") or [] for i in group})
            marks = runs(token_offsets_in(claim, r["claim_tokens"]), r["non_supported_spans"])
            meta = r.get("meta") or {}
            items.append(RealItem(
                id=f"wice/{meta.get('id', f'{split}{n}')}", set="wice", split=split, article=meta.get("claim_title", ""),
                sources=[{"id": "article", "title": meta.get("claim_title", ""), "text": text}], answer=claim,
                question=TOPIC_PROMPT.format(meta.get("claim_title", "")),
                marks=marks, label=r.get("label"),
                meta={"supporting": [[starts[i], starts[i] + len(evidence[i])] for i in supporting if i < len(evidence)],
                      "claim_context": meta.get("claim_context", "")}))
    return items


def xquad(files: dict[str, bytes], shares: dict[str, int]) -> list[RealItem]:
    (raw,) = files.values()
    items = []
    for art in json.loads(raw.decode("utf-8"))["data"]:
        split = article_split("xquad", art["title"], shares)
        for k, p in enumerate(art["paragraphs"]):
            for qa in p["qas"]:
                refs = list(dict.fromkeys(a["text"] for a in qa["answers"]))
                items.append(RealItem(
                    id=f"xquad/{qa['id']}", set="xquad", split=split, article=art["title"],
                    sources=[{"id": f"{art['title']}#{k}", "title": art["title"], "text": p["context"]}],
                    question=qa["question"], references=refs,
                    meta={"answer_start": [a["answer_start"] for a in qa["answers"]]}))
    return items


def edited_words(seed: str, summary: str) -> list[tuple[int, int]]:
    """Character spans of ``summary``'s words that a word diff with ``seed`` finds inserted or replaced (runs of
    adjacent changed words are one span)."""
    a = [m.group(0) for m in _WORD.finditer(seed)]
    spans = [m.span() for m in _WORD.finditer(summary)]
    b = [summary[s:e] for s, e in spans]
    out = []
    for tag, _, _, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        if tag in ("replace", "insert") and j2 > j1:
            out.append((spans[j1][0], spans[j2 - 1][1]))
    return out


def summedits(files: dict[str, bytes], shares: dict[str, int]) -> list[RealItem]:
    items = []
    for path, raw in sorted(files.items()):
        domain = path.rsplit("/", 1)[-1].removeprefix("summedits_").removesuffix(".json")
        for r in json.loads(raw.decode("utf-8")):
            article = f"{domain}:{hashlib.sha1(r['doc'].encode()).hexdigest()[:12]}"  # the document is the article
            edited = edited_words(r.get("original_summary") or r["summary"], r["summary"])
            consistent = int(r["label"]) == 1
            items.append(RealItem(
                id=f"summedits/{domain}/{r['id']}", set="summedits", split=article_split("summedits", article, shares),
                article=article, sources=[{"id": article, "title": domain, "text": r["doc"]}], answer=r["summary"],
                question=SUMMARY_PROMPT.format(DOMAINS.get(domain, domain)),
                marks=[] if consistent else edited, label="supported" if consistent else "not_supported",
                meta={"domain": domain, "edit_types": r.get("edit_types") or [],
                      **({"edited": [list(x) for x in edited]} if consistent and edited else {})}))
    return items


READERS = {"wice": wice, "xquad": xquad, "summedits": summedits}
