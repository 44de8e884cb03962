"""The capstone's data checks: load the text a config names (or refuse it in one line), and check that its splits
hold the batches the run asks for."""
from __future__ import annotations

from pathlib import Path

from trainkit.capstone.config import ConfigError, TrainConfig
from trainkit.corpus import ByteTokenizer, TokenData, load_text


def load_data(cfg: TrainConfig) -> TokenData:
    tok = ByteTokenizer()
    if cfg.data == "pydoc":
        text = load_text()
    else:
        path = Path(cfg.data)
        if not path.exists():
            raise ConfigError(f"data file not found: {path} (use data='pydoc' for the built-in corpus)")
        if not path.is_file():   # /dev/null, a folder, a pipe (which would block): only a regular file is text
            kind = "a folder" if path.is_dir() else "not a regular file (a device, a pipe or a socket)"
            raise ConfigError(f"data {path} is {kind}; data must be a UTF-8 text file or 'pydoc'")
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise ConfigError(f"data file {path} is not UTF-8 text: {e}") from None
        except OSError as e:
            raise ConfigError(f"cannot read data file {path}: {e.strerror or e}") from None
        if not text:   # TokenData would fail in torch.frombuffer, with a message about buffer lengths
            raise ConfigError(f"data file {path} is empty")
    data = TokenData.from_text(text, tok, val_fraction=cfg.val_fraction)
    T = cfg.model.block_size
    for split in ("train", "val"):
        if len(data.split(split)) < 2 * T + 1:
            raise ConfigError(f"data {cfg.data!r}: the {split} split has {len(data.split(split))} tokens, too few "
                              f"for block_size {T}")
    return data


def eval_batch_size(cfg: TrainConfig, data: TokenData, world_size: int) -> int:
    """The sequences per rank of an evaluation batch: ``batch_size``, or fewer where the validation split is small (the
    recipe's 1024). Refuses, in one line, a train split with fewer windows than one step of every rank needs, and a
    validation split with fewer windows than ranks."""
    need = cfg.batch_size * world_size
    windows = {split: (len(data.split(split)) - cfg.model.block_size) // cfg.model.block_size
               for split in ("train", "val")}
    if need > windows["train"]:
        raise ConfigError(f"batch_size {cfg.batch_size} x {world_size} rank(s) needs {need} windows of "
                          f"{cfg.model.block_size} tokens; the train split has only {windows['train']}")
    size = min(cfg.batch_size, windows["val"] // world_size)
    if size < 1:
        raise ConfigError(f"the val split has {windows['val']} windows of {cfg.model.block_size} tokens, fewer "
                          f"than the {world_size} rank(s)")
    return size
