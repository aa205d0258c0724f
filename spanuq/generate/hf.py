"""In-process transformers backend (CPU or GPU), batched."""
from __future__ import annotations

import torch

from ..config import Config
from ..llm import load_backbone
from .base import Completion


class HFGenerator:
    name = "hf"

    def __init__(self, cfg: Config, model=None, tokenizer=None):
        self.cfg = cfg.generate
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

    def sample(self, prompts: list[str], n: int, seeds: list[int]) -> list[list[Completion]]:
        out = []
        for prompt, seed in zip(prompts, seeds):
            torch.manual_seed(seed)
            outs = self._decode(
                [prompt], self.cfg.sample_max_new_tokens or self.cfg.max_new_tokens, do_sample=True, temperature=self.cfg.temperature, top_p=self.cfg.top_p,
                top_k=0, num_return_sequences=n,
            )
            out.append(outs)
        return out

    def close(self) -> None:
        pass
