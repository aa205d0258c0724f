"""In-process transformers backend (CPU or GPU), batched.

Samples of several prompts decode in one batch (B prompts × S samples rows), yet each
row draws from its own ``torch.Generator`` seeded from its prompt's seed, so a prompt's
samples do not depend on which prompts share its batch: a resumed run, or a different
``batch_size``, gives the same samples (up to float rounding of padded batches).
"""
from __future__ import annotations

import torch
from transformers import LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper, TopPLogitsWarper

from ..config import Config
from ..llm.loading import load_backbone, release_memory
from .base import Completion


class RowSeededSampler(LogitsProcessor):
    """Temperature + nucleus sampling with one random stream per row.

    Used with greedy decoding (``do_sample=False``): the processor draws each row's
    token from its own generator and leaves only that token finite, so the arg-max
    that ``generate`` takes is the sampled token.
    """

    def __init__(self, seeds: list[int], temperature: float, top_p: float):
        self.gens = [torch.Generator().manual_seed(int(s)) for s in seeds]
        self.warpers = [TemperatureLogitsWarper(temperature), TopPLogitsWarper(top_p)]

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for w in self.warpers:
            scores = w(input_ids, scores)
        probs = torch.softmax(scores.float(), dim=-1).cpu()
        picks = [int(torch.multinomial(probs[i], 1, generator=g)) for i, g in enumerate(self.gens)]
        out = torch.full_like(scores, float("-inf"))
        out[torch.arange(len(picks)), torch.tensor(picks, device=scores.device)] = 0.0
        return out


def sample_seeds(seed: int, n: int) -> list[int]:
    """The seeds of one prompt's n sample rows."""
    return [(seed * 1_000 + j) % (2**63 - 1) for j in range(n)]


class HFGenerator:
    name = "hf"

    def __init__(self, cfg: Config, model=None, tokenizer=None):
        self.cfg = cfg.generate
        self._owned = model is None  # loaded here: released by close()
        if model is None:
            model, tokenizer = load_backbone(cfg)
        self.model, self.tok = model, tokenizer
        self.tok.padding_side = "left"
        self.device = next(self.model.parameters()).device

    def _decode(self, prompts: list[str], max_new_tokens: int, **kw) -> list[Completion]:
        enc = self.tok(prompts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.device)
        if self.cfg.stop:
            kw.update(stop_strings=list(self.cfg.stop), tokenizer=self.tok)
        with torch.inference_mode():
            out = self.model.generate(
                **enc,
                max_new_tokens=max_new_tokens,
                pad_token_id=self.tok.pad_token_id,
                eos_token_id=self.tok.eos_token_id,
                **kw,
            )
        new = out[:, enc["input_ids"].shape[1]:]
        results = []
        eos = self.tok.eos_token_id
        for row in new.tolist():
            if eos in row:
                row, reason = row[: row.index(eos)], "stop"
            else:
                reason = "length"
            row = [t for t in row if t != self.tok.pad_token_id]
            text = self.tok.decode(row, skip_special_tokens=True)
            cut = min((i for i in (text.find(s) for s in self.cfg.stop) if i >= 0), default=-1)
            if cut >= 0:  # ended on a stop string: cut it off, as a server does
                text, reason = text[:cut], "stop"
            results.append(Completion(text.strip(), reason))
        return results

    def greedy(self, prompts: list[str]) -> list[Completion]:
        return self._decode(prompts, self.cfg.max_new_tokens, do_sample=False)

    def sample(self, prompts: list[str], n: int, seeds: list[int], first: int = 0) -> list[list[Completion]]:
        """Samples ``first .. n-1`` of each prompt (``first`` > 0: the ones a shorter run did not draw)."""
        k = n - first
        if k <= 0:
            return [[] for _ in prompts]
        rows = [p for p in prompts for _ in range(k)]
        sampler = RowSeededSampler([s for seed in seeds for s in sample_seeds(seed, n)[first:]],
                                   self.cfg.temperature, self.cfg.top_p)
        flat = self._decode(rows, self.cfg.sample_max_new_tokens or self.cfg.max_new_tokens,
                            do_sample=False, logits_processor=LogitsProcessorList([sampler]))
        return [flat[i * k:(i + 1) * k] for i in range(len(prompts))]

    def close(self) -> None:
        if self._owned and self.model is not None:
            self.model = None
            release_memory()
