"""Offline text for the capstone: Python's own reference documentation, byte-tokenised.

    from trainkit.corpus import ByteTokenizer, TokenData, load_text, unigram_loss

    tok = ByteTokenizer()
    data = TokenData.from_text(load_text(), tok)           # 90% train / last 10% validation, deterministic
    x, y = data.get_batch("train", batch_size=32, block_size=128, step=0, seed=0)   # (32, 128) each
    unigram_loss(data.train, data.val)                     # the bar a trained model must clearly beat (nats)

- ``load_text()``: the English text of ``pydoc_data.topics`` (the reference text behind ``help("topics")``,
  about 465 KB, shipped with every CPython), joined in sorted-key order, so it is the same for a given Python.
- ``ByteTokenizer``: UTF-8 bytes, vocabulary 256, nothing to train or download; ``describe()`` goes into the
  run manifest.
- ``TokenData.get_batch`` is a pure function of (split, seed, step, rank, world_size): one generator seeded from
  (seed, split, step) draws ``batch_size * world_size`` distinct, non-overlapping windows and rank r takes the
  r-th slice. Ranks never share a window within a step, and resuming needs only the step number.
"""
from __future__ import annotations

import hashlib
import math

import torch

VAL_FRACTION = 0.1


def load_text() -> str:
    """The English reference text in ``pydoc_data.topics``, topics joined in sorted-key order."""
    from pydoc_data.topics import topics

    return "\n\n".join(topics[key].strip("\n") for key in sorted(topics)) + "\n"


class ByteTokenizer:
    """Text <-> UTF-8 bytes. ``encode`` returns a 1-D int64 tensor of values 0..255; ``decode`` accepts a
    tensor or a list of ints and replaces byte sequences that are not valid UTF-8 (a model's sample can hold them)."""

    vocab_size = 256
    version = "bytes-utf8-v1"

    def encode(self, text: str) -> torch.Tensor:
        return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8).long()

    def decode(self, ids) -> str:
        if isinstance(ids, torch.Tensor):
            ids = ids.reshape(-1).tolist()
        return bytes(int(i) for i in ids).decode("utf-8", errors="replace")

    def describe(self) -> dict:
        return {"name": "ByteTokenizer", "version": self.version, "vocab_size": self.vocab_size}


def _generator(seed: int, split: str, step: int) -> torch.Generator:
    key = hashlib.sha256(f"{int(seed)}:{split}:{int(step)}".encode()).digest()
    return torch.Generator().manual_seed(int.from_bytes(key[:8], "little") & (2 ** 63 - 1))


class TokenData:
    """A token stream split into train (the first ``1 - val_fraction``) and validation (the rest)."""

    def __init__(self, tokens: torch.Tensor, val_fraction: float = VAL_FRACTION, tokenizer=None):
        if tokens.dim() != 1 or tokens.numel() < 2:
            raise ValueError(f"tokens must be a 1-D tensor with at least 2 ids, got shape {tuple(tokens.shape)}")
        if not 0.0 < val_fraction < 1.0:
            raise ValueError(f"val_fraction must be in (0, 1), got {val_fraction}")
        self.tokens = tokens.long().contiguous()
        self.tokenizer = tokenizer
        n_val = max(1, int(round(len(tokens) * val_fraction)))
        self.train = self.tokens[:-n_val]
        self.val = self.tokens[-n_val:]
        self.val_fraction = val_fraction

    @classmethod
    def from_text(cls, text: str, tokenizer: ByteTokenizer | None = None,
                  val_fraction: float = VAL_FRACTION) -> "TokenData":
        tokenizer = tokenizer or ByteTokenizer()
        return cls(tokenizer.encode(text), val_fraction=val_fraction, tokenizer=tokenizer)

    @classmethod
    def default(cls) -> "TokenData":
        """The course's corpus: ``load_text()`` through ``ByteTokenizer``."""
        return cls.from_text(load_text(), ByteTokenizer())

    def split(self, name: str) -> torch.Tensor:
        if name == "train":
            return self.train
        if name in ("val", "validation"):
            return self.val
        raise ValueError(f"split must be 'train' or 'val', got {name!r}")

    def sha256(self) -> str:
        """Hash of the whole token stream and the split point (for the run manifest)."""
        h = hashlib.sha256(self.tokens.numpy().astype("<i8").tobytes())
        h.update(f"|val={len(self.val)}".encode())
        return h.hexdigest()

    def describe(self) -> dict:
        return {"tokens": int(self.tokens.numel()), "train_tokens": int(self.train.numel()),
                "val_tokens": int(self.val.numel()), "val_fraction": self.val_fraction, "sha256": self.sha256(),
                "tokenizer": self.tokenizer.describe() if self.tokenizer is not None else None}

    def get_batch(self, split: str, batch_size: int, block_size: int, step: int, seed: int, rank: int = 0,
                  world_size: int = 1, device: torch.device | str = "cpu") -> tuple[torch.Tensor, torch.Tensor]:
        """Inputs and next-token targets, each (batch_size, block_size) int64 on ``device``; see the module doc."""
        return get_batch(self.split(split), batch_size, block_size, step, seed, rank=rank, world_size=world_size,
                         device=device, split_name=split)


def get_batch(tokens: torch.Tensor, batch_size: int, block_size: int, step: int, seed: int, rank: int = 0,
              world_size: int = 1, device: torch.device | str = "cpu", split_name: str = "train"):
    """Windows of ``tokens`` for one step and one rank, a pure function of its arguments.

    The stream is cut into windows of ``block_size`` starting at ``shift + i * block_size`` (a per-step shift in
    [0, block_size) so that every position is eventually seen at every offset); ``batch_size * world_size``
    distinct windows are drawn without replacement, and rank r takes draws [r * batch_size, (r + 1) * batch_size).
    """
    if not 0 <= rank < world_size:
        raise ValueError(f"rank must be in [0, world_size={world_size}), got {rank}")
    n_windows = (len(tokens) - block_size) // block_size
    need = batch_size * world_size
    if need > n_windows:
        raise ValueError(f"{split_name} split of {len(tokens)} tokens has {n_windows} windows of {block_size}; "
                         f"batch_size * world_size = {need} is more than that")
    g = _generator(seed, split_name, step)
    shift = int(torch.randint(block_size, (1,), generator=g))
    windows = torch.randperm(n_windows, generator=g)[rank * batch_size:(rank + 1) * batch_size]
    starts = shift + windows * block_size                            # (B,)
    index = starts[:, None] + torch.arange(block_size + 1)[None, :]  # (B, T + 1)
    chunk = tokens[index]
    x, y = chunk[:, :-1], chunk[:, 1:]
    if torch.device(device).type == "cuda":
        return x.pin_memory().to(device, non_blocking=True), y.pin_memory().to(device, non_blocking=True)
    return x.to(device), y.to(device)


def unigram_loss(train_tokens: torch.Tensor, val_tokens: torch.Tensor, vocab_size: int = 256) -> float:
    """Validation cross-entropy (nats per token) of the unigram model fitted on ``train_tokens`` (token
    frequencies with add-one smoothing, so a byte never seen in training still has a finite cost)."""
    counts = torch.bincount(train_tokens.reshape(-1).long(), minlength=vocab_size).double() + 1.0
    log_p = counts.log() - math.log(float(counts.sum()))
    return float(-log_p[val_tokens.reshape(-1).long()].mean())
