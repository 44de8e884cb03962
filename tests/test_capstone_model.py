"""The capstone's model and data (trainkit.gpt, trainkit.corpus): shapes, causality, GQA against plain
multi-head attention written out by hand, the seed recipe's exact parameter count, initialisation, and the
determinism of the data split and of get_batch."""
from __future__ import annotations

import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from trainkit.corpus import ByteTokenizer, TokenData, get_batch, load_text, unigram_loss
from trainkit.gpt import GPT, GPTConfig, param_counts


def small_cfg(**kw) -> GPTConfig:
    return GPTConfig(**{**dict(vocab_size=50, block_size=16, n_layer=2, d_model=32, n_heads_q=4, n_heads_kv=2,
                               d_ff=48, tie_weights=False), **kw})


def test_shapes_and_loss():
    torch.manual_seed(0)
    model = GPT(small_cfg())
    idx = torch.randint(50, (3, 16))
    logits, loss = model(idx)
    assert logits.shape == (3, 16, 50) and loss is None
    logits, loss = model(idx, idx)
    assert loss.dim() == 0
    expected = F.cross_entropy(logits.reshape(-1, 50), idx.reshape(-1))
    torch.testing.assert_close(loss, expected)
    # at initialisation the output is close to uniform: loss near ln(vocab)
    assert abs(loss.item() - math.log(50)) < 0.1, loss.item()
    with pytest.raises(ValueError, match="block_size"):
        model(torch.zeros(1, 17, dtype=torch.long))


@pytest.mark.parametrize("n_heads_kv", [1, 2, 4])
def test_causal(n_heads_kv):
    torch.manual_seed(0)
    model = GPT(small_cfg(n_heads_kv=n_heads_kv)).eval()
    idx = torch.randint(50, (2, 16))
    changed = idx.clone()
    changed[:, 9] = (changed[:, 9] + 7) % 50
    a, _ = model(idx)
    b, _ = model(changed)
    torch.testing.assert_close(a[:, :9], b[:, :9], rtol=0, atol=0)   # the past does not see the future
    assert (a[:, 9:] - b[:, 9:]).abs().max() > 1e-4                   # ... and the future does see it


def reference_attention(attn, x: torch.Tensor, n_heads_q: int, n_heads_kv: int) -> torch.Tensor:
    """Attention written out by hand from the module's weights: every query head h uses key/value head
    h // (n_heads_q // n_heads_kv); softmax(q k^T / sqrt(d) + causal mask) v, then the output projection."""
    B, T, C = x.shape
    hd = C // n_heads_q
    w = attn.c_attn.weight
    wq, wk, wv = w.split([n_heads_q * hd, n_heads_kv * hd, n_heads_kv * hd], dim=0)
    group = n_heads_q // n_heads_kv
    mask = torch.ones(T, T, dtype=torch.bool).tril()
    heads = []
    for h in range(n_heads_q):
        kvh = h // group
        q = x @ wq[h * hd:(h + 1) * hd].T
        k = x @ wk[kvh * hd:(kvh + 1) * hd].T
        v = x @ wv[kvh * hd:(kvh + 1) * hd].T
        scores = (q @ k.transpose(1, 2)) / math.sqrt(hd)
        heads.append(scores.masked_fill(~mask, float("-inf")).softmax(-1) @ v)
    return torch.cat(heads, dim=-1) @ attn.c_proj.weight.T


@pytest.mark.parametrize("n_heads_kv", [4, 2, 1])
def test_gqa_matches_hand_written_attention(n_heads_kv):
    torch.manual_seed(0)
    model = GPT(small_cfg(n_heads_kv=n_heads_kv)).double()
    attn = model.transformer.h[0].attn
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    torch.testing.assert_close(attn(x), reference_attention(attn, x, 4, n_heads_kv), rtol=1e-10, atol=1e-12)


def test_gqa_with_equal_heads_is_multi_head_attention():
    """n_heads_kv == n_heads_q on the same weights gives what torch's nn.MultiheadAttention gives."""
    torch.manual_seed(0)
    model = GPT(small_cfg(n_heads_kv=4)).double()
    attn = model.transformer.h[0].attn
    mha = nn.MultiheadAttention(32, 4, bias=False, batch_first=True, dtype=torch.float64)
    with torch.no_grad():
        mha.in_proj_weight.copy_(attn.c_attn.weight)  # [q; k; v] rows, the same layout
        mha.out_proj.weight.copy_(attn.c_proj.weight)
    x = torch.randn(2, 16, 32, dtype=torch.float64)
    mask = nn.Transformer.generate_square_subsequent_mask(16, dtype=torch.float64)
    expected, _ = mha(x, x, x, attn_mask=mask, need_weights=False)
    torch.testing.assert_close(attn(x), expected, rtol=1e-10, atol=1e-12)


def test_seed_recipe_parameter_count():
    """d_model 512, 8 layers, 8/4 heads, d_ff 1536, block 1024, vocab 50257 (computed by hand below)."""
    d, L, hd, kv, ff, T, V = 512, 8, 64, 4, 1536, 1024, 50257
    per_block = d * (d + 2 * kv * hd) + d * d + 3 * d * ff + 2 * d   # qkv, out proj, SwiGLU, two RMSNorms
    non_embedding = L * per_block + d                                  # + final RMSNorm
    assert non_embedding == 25_174_528
    with torch.device("meta"):
        tied = GPT(GPTConfig.seed_recipe())
        untied = GPT(GPTConfig.seed_recipe(tie_weights=False))
    assert param_counts(tied) == {"embedding": V * d + T * d, "non_embedding": non_embedding,
                                  "total": V * d + T * d + non_embedding}
    assert param_counts(tied)["total"] == 51_430_400          # "30M-param" in the guide: really 51.4M
    assert param_counts(untied)["total"] == 77_161_984
    assert param_counts(untied)["embedding"] == 2 * V * d + T * d


def test_param_counts_tied_counted_once_and_total_matches():
    model = GPT(small_cfg(tie_weights=True))
    counts = param_counts(model)
    assert model.lm_head.weight is model.transformer.wte.weight
    assert counts["total"] == sum(p.numel() for p in model.parameters())
    assert counts["embedding"] == 50 * 32 + 16 * 32


def test_initialisation():
    torch.manual_seed(0)
    cfg = small_cfg(n_layer=8, d_model=128, d_ff=256, vocab_size=1000, block_size=64)
    model = GPT(cfg)
    residual_std = 0.02 / math.sqrt(2 * 8)
    for name, p in model.named_parameters():
        if name.endswith("c_proj.weight"):
            assert abs(p.std().item() - residual_std) < 0.1 * residual_std, (name, p.std().item())
        elif p.dim() == 2:
            assert abs(p.std().item() - 0.02) < 0.1 * 0.02, (name, p.std().item())
        else:
            assert torch.equal(p, torch.ones_like(p)), name  # RMSNorm weights start at 1
    assert not any(name.endswith("bias") for name, _ in model.named_parameters())


def test_rmsnorm_matches_torch():
    """The CPU RMSNorm (hand-written backward) gives nn.RMSNorm's values and gradients."""
    from trainkit.gpt import RMSNorm, _RMSNormFunction

    torch.manual_seed(0)
    ours, theirs = RMSNorm(8, eps=1e-5).double(), nn.RMSNorm(8, eps=1e-5).double()
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = torch.randn(3, 5, 8, dtype=torch.float64, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    g = torch.randn(3, 5, 8, dtype=torch.float64)
    ours(x).backward(g)
    theirs(x2).backward(g)
    torch.testing.assert_close(ours(x), theirs(x2), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(x.grad, x2.grad, rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(ours.weight.grad, theirs.weight.grad, rtol=1e-10, atol=1e-12)
    assert torch.autograd.gradcheck(lambda a, w: _RMSNormFunction.apply(a, w, 1e-5), (x, ours.weight))


def test_config_errors():
    with pytest.raises(ValueError, match="n_heads_kv"):
        small_cfg(n_heads_kv=3)
    with pytest.raises(ValueError, match="d_model"):
        small_cfg(d_model=30)
    with pytest.raises(ValueError, match="norm"):
        small_cfg(norm="layernorm")


# ----------------------------------------------------------------------------------------------- data
@pytest.fixture(scope="module")
def data() -> TokenData:
    return TokenData.default()


def test_text_and_tokenizer():
    text = load_text()
    assert len(text) > 400_000 and text == load_text()
    tok = ByteTokenizer()
    ids = tok.encode("héllo")
    assert ids.dtype == torch.int64 and ids.tolist() == list("héllo".encode())
    assert tok.decode(ids) == "héllo" and tok.decode([104, 105]) == "hi"
    assert tok.describe()["version"] == tok.version


def test_split_is_deterministic(data):
    again = TokenData.default()
    assert torch.equal(data.train, again.train) and torch.equal(data.val, again.val)
    assert data.sha256() == again.sha256()
    assert len(data.val) == round(0.1 * len(data.tokens))
    assert torch.equal(torch.cat([data.train, data.val]), data.tokens)  # contiguous: validation is the tail


def test_get_batch_is_pure_and_shifted(data):
    x, y = data.get_batch("train", 8, 32, step=5, seed=3)
    x2, y2 = data.get_batch("train", 8, 32, step=5, seed=3)
    assert x.shape == y.shape == (8, 32) and x.dtype == torch.int64
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert torch.equal(x[:, 1:], y[:, :-1])  # targets are the inputs shifted by one
    assert not torch.equal(x, data.get_batch("train", 8, 32, step=6, seed=3)[0])
    assert not torch.equal(x, data.get_batch("train", 8, 32, step=5, seed=4)[0])
    torch.manual_seed(123)  # the global RNG plays no part
    assert torch.equal(x, data.get_batch("train", 8, 32, step=5, seed=3)[0])


def test_get_batch_ranks_disjoint(data):
    world, B, T = 4, 8, 32
    for step in range(3):
        rows = [data.get_batch("train", B, T, step=step, seed=0, rank=r, world_size=world)[0] for r in range(world)]
        starts = set()
        for r, x in enumerate(rows):
            for row in x:  # every row is a different window of the text
                starts.add(tuple(row.tolist()))
        assert len(starts) == world * B, "two ranks (or two rows) got the same window"
        # rank r's rows are the r-th slice of one draw of B * world windows
        whole = data.get_batch("train", B * world, T, step=step, seed=0)[0]
        torch.testing.assert_close(torch.cat(rows), whole, rtol=0, atol=0)


def test_get_batch_errors(data):
    with pytest.raises(ValueError, match="rank"):
        data.get_batch("train", 2, 8, step=0, seed=0, rank=2, world_size=2)
    with pytest.raises(ValueError, match="windows"):
        get_batch(torch.arange(100), 20, 8, step=0, seed=0)
    with pytest.raises(ValueError, match="split"):
        data.get_batch("test", 2, 8, step=0, seed=0)


def test_unigram_loss(data):
    loss = unigram_loss(data.train, data.val)
    assert 2.0 < loss < math.log(256)
    # a hand check on a toy stream: train "aab", val "ab" with add-one smoothing over 256 symbols
    train, val = torch.tensor([97, 97, 98]), torch.tensor([97, 98])
    expected = -(math.log(3 / 259) + math.log(2 / 259)) / 2
    assert abs(unigram_loss(train, val) - expected) < 1e-12
