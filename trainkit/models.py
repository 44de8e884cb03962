"""Small models shared by lessons and labs: a plain MLP and a tiny GPT.

The GPT uses nanoGPT-style module names (``transformer.h.0.attn.c_proj`` ...), so the init and
weight-decay conventions that the course teaches can be written against familiar names. It is
deliberately left at PyTorch's default initialisation: initialising it is an exercise.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

ACTIVATIONS = {"relu": nn.ReLU, "tanh": nn.Tanh, "gelu": nn.GELU, "sigmoid": nn.Sigmoid, "linear": nn.Identity}


def mlp(n_in: int, width: int, depth: int, n_out: int, activation: str = "relu", bias: bool = True) -> nn.Sequential:
    """``depth`` hidden layers of ``width`` units, each Linear followed by the activation, then a Linear head."""
    layers: list[nn.Module] = []
    dims = [n_in] + [width] * depth
    for d_in, d_out in zip(dims[:-1], dims[1:]):
        layers += [nn.Linear(d_in, d_out, bias=bias), ACTIVATIONS[activation]()]
    layers.append(nn.Linear(dims[-1], n_out, bias=bias))
    return nn.Sequential(*layers)


@dataclass
class TinyGPTConfig:
    """The tiny GPT of lessons 1-7, with nanoGPT's names (n_embd, n_layer). The capstone's model has its own config,
    trainkit.capstone.gpt.GPTConfig (d_model, grouped-query heads)."""
    vocab_size: int = 64
    block_size: int = 32
    n_layer: int = 2
    n_head: int = 2
    n_embd: int = 64
    bias: bool = True
    tie_weights: bool = False


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        assert cfg.n_embd % cfg.n_head == 0
        self.n_head = cfg.n_head
        self.c_attn = nn.Linear(cfg.n_embd, 3 * cfg.n_embd, bias=cfg.bias)  # q, k, v in one matmul
        self.c_proj = nn.Linear(cfg.n_embd, cfg.n_embd, bias=cfg.bias)      # output projection (residual)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        q, k, v = self.c_attn(x).split(C, dim=2)
        q, k, v = (t.view(B, T, self.n_head, C // self.n_head).transpose(1, 2) for t in (q, k, v))  # (B, nh, T, hs)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)                               # (B, nh, T, hs)
        return self.c_proj(y.transpose(1, 2).contiguous().view(B, T, C))


class MLP(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.n_embd, 4 * cfg.n_embd, bias=cfg.bias)
        self.gelu = nn.GELU()
        self.c_proj = nn.Linear(4 * cfg.n_embd, cfg.n_embd, bias=cfg.bias)  # output projection (residual)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.gelu(self.c_fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.attn = CausalSelfAttention(cfg)
        self.ln_2 = nn.LayerNorm(cfg.n_embd, bias=cfg.bias)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln_1(x))  # pre-norm residual: each block adds two branches
        return x + self.mlp(self.ln_2(x))


class TinyGPT(nn.Module):
    """A decoder-only transformer small enough to train on a CPU in seconds."""

    def __init__(self, cfg: TinyGPTConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.n_embd),
            wpe=nn.Embedding(cfg.block_size, cfg.n_embd),
            h=nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)]),
            ln_f=nn.LayerNorm(cfg.n_embd, bias=cfg.bias),
        ))
        self.lm_head = nn.Linear(cfg.n_embd, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.wte(idx) + self.transformer.wpe(pos)  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))           # (B, T, vocab)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
        return logits, loss


# The tiny GPT's config was called GPTConfig, as the capstone's is: this old name stays for one term (students' own
# copies import it).
GPTConfig = TinyGPTConfig
