"""The capstone's GPT: a small decoder-only transformer with grouped-query attention.

Architecture (pre-norm, no biases anywhere):

    idx (B, T) -> token embedding + learned position embedding -> n_layer blocks -> RMSNorm -> lm_head -> logits

    block:  x = x + attn(RMSNorm(x))      grouped-query causal self-attention
            x = x + mlp(RMSNorm(x))       SwiGLU:  c_proj(silu(x W_gate) * (x W_up))

- Grouped-query attention: ``n_heads_q`` query heads share ``n_heads_kv`` key/value heads (each key/value head
  serves ``n_heads_q // n_heads_kv`` query heads). ``n_heads_kv == n_heads_q`` is ordinary multi-head attention,
  ``n_heads_kv == 1`` is multi-query attention. Attention itself is ``F.scaled_dot_product_attention``.
- Positions: a learned table of ``block_size`` vectors (as GPT-2), added to the token embedding.
- Norms: RMSNorm (``nn.RMSNorm``: a weight, initialised to 1, and no bias; a faster backward on the CPU).
- MLP: SwiGLU with hidden width ``d_ff`` (three ``d_model x d_ff`` matrices).
- Initialisation as lesson 1 teaches for GPT-style models: every linear weight and embedding N(0, 0.02); the two
  projections that write into the residual stream (``attn.c_proj`` and ``mlp.c_proj``) N(0, 0.02 / sqrt(2 n_layer));
  norm weights 1. With ``tie_weights`` the output head shares the token embedding's matrix.

Module names follow nanoGPT's where they exist (``transformer.wte``, ``transformer.h.0.attn.c_proj`` ...).
"""
from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch
import torch.nn as nn
import torch.nn.functional as F

INIT_STD = 0.02


@dataclass
class GPTConfig:
    vocab_size: int = 256
    block_size: int = 128
    n_layer: int = 4
    d_model: int = 128
    n_heads_q: int = 4
    n_heads_kv: int = 2
    d_ff: int = 384
    tie_weights: bool = True
    norm: str = "rmsnorm"
    mlp: str = "swiglu"
    dropout: float = 0.0

    def __post_init__(self):
        for name in ("vocab_size", "block_size", "n_layer", "d_model", "n_heads_q", "n_heads_kv", "d_ff"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"GPTConfig.{name} must be a positive int, got {value!r}")
        if self.d_model % self.n_heads_q:
            raise ValueError(f"d_model ({self.d_model}) must be divisible by n_heads_q ({self.n_heads_q})")
        if self.n_heads_q % self.n_heads_kv:
            raise ValueError(f"n_heads_q ({self.n_heads_q}) must be a multiple of n_heads_kv ({self.n_heads_kv})")
        if self.norm != "rmsnorm":
            raise ValueError(f"GPTConfig.norm: only 'rmsnorm' is implemented, got {self.norm!r}")
        if self.mlp != "swiglu":
            raise ValueError(f"GPTConfig.mlp: only 'swiglu' is implemented, got {self.mlp!r}")
        if not 0.0 <= float(self.dropout) < 1.0:
            raise ValueError(f"GPTConfig.dropout must be in [0, 1), got {self.dropout!r}")

    @property
    def head_dim(self) -> int:
        return self.d_model // self.n_heads_q

    @classmethod
    def tiny(cls, **overrides) -> "GPTConfig":
        """A byte-level model that trains on a 2-core CPU in about a minute: 4 layers, d_model 128, block 128,
        4 query heads sharing 2 key/value heads, SwiGLU width 384, tied head (about 0.8M parameters)."""
        return cls(**{**dict(vocab_size=256, block_size=128, n_layer=4, d_model=128, n_heads_q=4, n_heads_kv=2,
                             d_ff=384, tie_weights=True), **overrides})

    @classmethod
    def seed_recipe(cls, **overrides) -> "GPTConfig":
        """The infrastructure guide's "30M-param" recipe: d_model 512, 8 layers, 8 query / 4 key-value heads,
        d_ff 1536, block 1024, GPT-2's vocabulary of 50257. With this model's choices (SwiGLU, learned positions,
        tied head) it has 51.4M parameters, 25.2M of them outside the embeddings (``param_counts``)."""
        return cls(**{**dict(vocab_size=50257, block_size=1024, n_layer=8, d_model=512, n_heads_q=8, n_heads_kv=4,
                             d_ff=1536, tie_weights=True), **overrides})

    def to_dict(self) -> dict:
        return asdict(self)


class _RMSNormFunction(torch.autograd.Function):
    """y = x / sqrt(mean(x^2) + eps) * weight with a hand-written backward: on the CPU, where PyTorch has no fused
    RMSNorm kernel, this is about 1.5x faster than autograd through nn.RMSNorm's decomposition (same values)."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True).add_(eps))  # (..., 1)
        xhat = x * rstd
        ctx.save_for_backward(xhat, rstd, weight)
        return xhat * weight

    @staticmethod
    def backward(ctx, grad):
        xhat, rstd, weight = ctx.saved_tensors
        grad_weight = (grad * xhat).reshape(-1, xhat.shape[-1]).sum(0) if ctx.needs_input_grad[1] else None
        gh = grad * weight
        grad_x = (gh - xhat * (gh * xhat).mean(-1, keepdim=True)).mul_(rstd)
        return grad_x, grad_weight, None


class RMSNorm(nn.RMSNorm):
    """``nn.RMSNorm`` (weight initialised to 1, no bias); on the CPU in eager mode it runs the hand-written
    backward above, elsewhere (CUDA, torch.compile) PyTorch's own kernels."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.device.type == "cpu" and x.dtype == self.weight.dtype and not torch.compiler.is_compiling():
            return _RMSNormFunction.apply(x, self.weight, self.eps)
        return super().forward(x)


class GroupedQueryAttention(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.n_heads_q, self.n_heads_kv, self.head_dim = cfg.n_heads_q, cfg.n_heads_kv, cfg.head_dim
        self.dropout = cfg.dropout
        # q, k, v in one matmul: n_heads_q query heads, then n_heads_kv key heads and n_heads_kv value heads
        self.c_attn = nn.Linear(cfg.d_model, (cfg.n_heads_q + 2 * cfg.n_heads_kv) * cfg.head_dim, bias=False)
        self.c_proj = nn.Linear(cfg.d_model, cfg.d_model, bias=False)  # writes into the residual stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.shape
        hq, hkv, hd = self.n_heads_q, self.n_heads_kv, self.head_dim
        q, k, v = self.c_attn(x).split([hq * hd, hkv * hd, hkv * hd], dim=2)
        q = q.view(B, T, hq, hd).transpose(1, 2)   # (B, hq, T, hd)
        k = k.view(B, T, hkv, hd).transpose(1, 2)  # (B, hkv, T, hd)
        v = v.view(B, T, hkv, hd).transpose(1, 2)  # (B, hkv, T, hd)
        if hkv != hq:  # query head i reads key/value head i // (hq // hkv)
            k = k.repeat_interleave(hq // hkv, dim=1)  # (B, hq, T, hd)
            v = v.repeat_interleave(hq // hkv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True,
                                           dropout_p=self.dropout if self.training else 0.0)  # (B, hq, T, hd)
        return self.c_proj(y.transpose(1, 2).reshape(B, T, C))


class SwiGLU(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.c_fc = nn.Linear(cfg.d_model, 2 * cfg.d_ff, bias=False)  # gate and up projections in one matmul
        self.c_proj = nn.Linear(cfg.d_ff, cfg.d_model, bias=False)    # writes into the residual stream

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        gate, up = self.c_fc(x).chunk(2, dim=-1)
        return self.c_proj(F.silu(gate) * up)


class Block(nn.Module):
    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.ln_1 = RMSNorm(cfg.d_model, eps=1e-5)
        self.attn = GroupedQueryAttention(cfg)
        self.ln_2 = RMSNorm(cfg.d_model, eps=1e-5)
        self.mlp = SwiGLU(cfg)
        self.drop = nn.Dropout(cfg.dropout)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.drop(self.attn(self.ln_1(x)))  # pre-norm: each block adds two branches to the residual stream
        return x + self.drop(self.mlp(self.ln_2(x)))


class GPT(nn.Module):
    """Decoder-only transformer; ``forward(idx, targets=None) -> (logits, loss)``.

    idx: (B, T) token ids, T <= block_size. logits: (B, T, vocab_size). loss: mean cross-entropy (nats) over all
    B*T positions when ``targets`` (B, T) is given, else None.
    """

    def __init__(self, cfg: GPTConfig):
        super().__init__()
        self.cfg = cfg
        self.transformer = nn.ModuleDict(dict(
            wte=nn.Embedding(cfg.vocab_size, cfg.d_model),
            wpe=nn.Embedding(cfg.block_size, cfg.d_model),
            drop=nn.Dropout(cfg.dropout),
            h=nn.ModuleList(Block(cfg) for _ in range(cfg.n_layer)),
            ln_f=RMSNorm(cfg.d_model, eps=1e-5),
        ))
        self.lm_head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        if cfg.tie_weights:
            self.lm_head.weight = self.transformer.wte.weight
        self._init_weights()

    @torch.no_grad()
    def _init_weights(self) -> None:
        residual_std = INIT_STD / math.sqrt(2 * self.cfg.n_layer)
        for name, module in self.named_modules():
            if isinstance(module, (nn.Linear, nn.Embedding)):
                if module is self.lm_head and self.cfg.tie_weights:
                    continue  # the token embedding's matrix, initialised as an embedding
                std = residual_std if name.endswith("c_proj") else INIT_STD
                nn.init.normal_(module.weight, mean=0.0, std=std)
            elif isinstance(module, nn.RMSNorm):
                nn.init.ones_(module.weight)

    def forward(self, idx: torch.Tensor, targets: torch.Tensor | None = None):
        B, T = idx.shape
        if T > self.cfg.block_size:
            raise ValueError(f"sequence length {T} is longer than block_size {self.cfg.block_size}")
        pos = torch.arange(T, device=idx.device)
        x = self.transformer.drop(self.transformer.wte(idx) + self.transformer.wpe(pos))  # (B, T, C)
        for block in self.transformer.h:
            x = block(x)
        logits = self.lm_head(self.transformer.ln_f(x))  # (B, T, V)
        loss = None
        if targets is not None:
            loss = F.cross_entropy(logits.reshape(-1, logits.size(-1)).float(), targets.reshape(-1))
        return logits, loss


def param_counts(model: nn.Module) -> dict:
    """Parameters of ``model`` split into embedding and non-embedding; a shared (tied) tensor counts once.

    "embedding": the token table, the position table and an untied output head (the vocabulary- and
    position-sized matrices); "non_embedding": everything else (attention, MLP, norms); "total": their sum,
    which equals the number of distinct parameter elements. Works on a GPT, a DDP-wrapped or a compiled one.
    """
    inner = getattr(model, "_orig_mod", model)
    inner = getattr(inner, "module", inner)
    embedding_tensors = set()
    for name, module in inner.named_modules():
        if isinstance(module, nn.Embedding) or name.endswith("lm_head"):
            embedding_tensors.add(id(module.weight))
    embedding = non_embedding = 0
    for p in inner.parameters():  # parameters() yields a shared tensor once
        if id(p) in embedding_tensors:
            embedding += p.numel()
        else:
            non_embedding += p.numel()
    return {"embedding": embedding, "non_embedding": non_embedding, "total": embedding + non_embedding}


@torch.no_grad()
def sample(model: GPT, tokenizer=None, prompt: str = "The ", n_new: int = 240, temperature: float = 0.8,
           seed: int = 0) -> str:
    """``prompt`` and ``n_new`` tokens sampled after it at ``temperature``, decoded by ``tokenizer`` (by default the
    capstone's ``ByteTokenizer``).

    The draws come from a private generator seeded with ``seed``, so sampling in the middle of a run leaves the run's
    own random state (dropout, data) untouched; the model's train/eval mode is restored after.
    """
    if tokenizer is None:
        from trainkit.corpus import ByteTokenizer

        tokenizer = ByteTokenizer()
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    generator = torch.Generator(device=device).manual_seed(seed)
    idx = tokenizer.encode(prompt)[None].to(device)
    for _ in range(n_new):
        logits, _ = model(idx[:, -model.cfg.block_size:])
        probs = torch.softmax(logits[:, -1].float() / temperature, dim=-1)
        idx = torch.cat([idx, torch.multinomial(probs, 1, generator=generator)], dim=1)
    model.train(was_training)
    return tokenizer.decode(idx[0])
