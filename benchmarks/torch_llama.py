"""The PyTorch twin of subdp's LLaMA (models/llama.h), parameter names as subdp's: RMSNorm
pre-norm blocks, rotary embeddings (rotate-half form), SwiGLU MLP, no biases, untied head.
q, k and v are one packed weight, layers.<i>.attention.wqkv.weight ((heads + 2 kv_heads) hd, C),
split into wq (heads hd rows), wk and wv (kv_heads hd rows each) in forward; with grouped-query
attention (kv_heads < heads) each key / value head serves heads / kv_heads query heads
(repeat_interleave, as the LLaMA reference code's repeat_kv). Written for PyTorch 1.13 (Debian's),
which has no nn.RMSNorm.
"""
import torch
import torch.nn as nn
import torch.nn.functional as F


class RMSNorm(nn.Module):
    """y = x / sqrt(mean(x^2) + eps) * weight (torch.nn.RMSNorm of later PyTorch)."""

    def __init__(self, d, eps=1e-5):
        super().__init__()
        self.weight, self.eps = nn.Parameter(torch.ones(d)), eps

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def rope_tables(ctx, hd, theta):
    """cos, sin (ctx, hd/2) of t * theta^(-2i/hd), computed in float64 and rounded once (as subdp)."""
    inv = theta ** (-torch.arange(0, hd, 2, dtype=torch.float64) / hd)
    angle = torch.outer(torch.arange(ctx, dtype=torch.float64), inv)
    return angle.cos().float(), angle.sin().float()


def rotate(x, cos, sin):
    """x (B, H, T, hd): pairs (i, i + hd/2) rotated by the position's angle."""
    half = x.shape[-1] // 2
    a, b = x[..., :half], x[..., half:]
    return torch.cat([a * cos - b * sin, b * cos + a * sin], dim=-1)


class Attention(nn.Module):
    def __init__(self, d, heads, kv_heads=None):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads or heads
        hd = d // heads
        self.wqkv = nn.Linear(d, (heads + 2 * self.kv_heads) * hd, bias=False)
        self.wo = nn.Linear(d, d, bias=False)

    def forward(self, x, cos, sin):
        B, T, C = x.shape
        hd, kv = C // self.heads, self.kv_heads
        q, k, v = self.wqkv(x).split([C, kv * hd, kv * hd], dim=2)
        q = q.view(B, T, self.heads, hd).transpose(1, 2)
        k, v = (t.view(B, T, kv, hd).transpose(1, 2).repeat_interleave(self.heads // kv, dim=1) for t in (k, v))
        q, k = rotate(q, cos[:T], sin[:T]), rotate(k, cos[:T], sin[:T])
        att = (q @ k.transpose(-2, -1)) / hd ** 0.5
        att = att.masked_fill(torch.ones(T, T, dtype=torch.bool).triu(1), float("-inf")).softmax(-1)
        return self.wo((att @ v).transpose(1, 2).reshape(B, T, C))


class FeedForward(nn.Module):
    def __init__(self, d, hidden):
        super().__init__()
        self.w1, self.w3 = nn.Linear(d, hidden, bias=False), nn.Linear(d, hidden, bias=False)
        self.w2 = nn.Linear(hidden, d, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class Block(nn.Module):
    def __init__(self, d, heads, hidden, kv_heads=None):
        super().__init__()
        self.attention_norm, self.ffn_norm = RMSNorm(d), RMSNorm(d)
        self.attention, self.feed_forward = Attention(d, heads, kv_heads), FeedForward(d, hidden)

    def forward(self, x, cos, sin):
        x = x + self.attention(self.attention_norm(x), cos, sin)
        return x + self.feed_forward(self.ffn_norm(x))


def ffn_width(d):
    """subdp's default SwiGLU width: 8d/3 rounded up to a multiple of 64."""
    return (8 * d // 3 + 63) // 64 * 64


class Llama(nn.Module):
    """configs/llama_brown.toml's sizes by default."""

    def __init__(self, vocab=256, ctx=128, d=256, heads=8, depth=6, hidden=None, theta=10000.0, kv_heads=None):
        super().__init__()
        self.tok_embeddings = nn.Embedding(vocab, d)
        self.layers = nn.ModuleList([Block(d, heads, hidden or ffn_width(d), kv_heads) for _ in range(depth)])
        self.norm, self.output = RMSNorm(d), nn.Linear(d, vocab, bias=False)
        cos, sin = rope_tables(ctx, d // heads, theta)
        self.register_buffer("cos", cos, persistent=False)
        self.register_buffer("sin", sin, persistent=False)

    def forward(self, idx):
        x = self.tok_embeddings(idx)
        for layer in self.layers:
            x = layer(x, self.cos, self.sin)
        return self.output(self.norm(x))
