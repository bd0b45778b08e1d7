"""Small models written in plain PyTorch, as their users write them: a
nanoGPT-style GPT-2 (tied head, registered causal mask, GELU tanh, or
written out as Hugging Face's GPT-2 has it) and a
LLaMA-style decoder (RMSNorm, SwiGLU, rotary embeddings, no biases). The
importer tests train them with Strata and PyTorch side by side.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class CausalSelfAttention(nn.Module):
    def __init__(self, hidden, heads, seq, dropout):
        super().__init__()
        self.c_attn = nn.Linear(hidden, 3 * hidden)
        self.c_proj = nn.Linear(hidden, hidden)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(seq, seq))
                             .view(1, 1, seq, seq))

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(B, T, C)
        return self.resid_dropout(self.c_proj(y))


def new_gelu(x):
    """GPT-2's GELU written out, as Hugging Face's NewGELUActivation."""
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) *
                                       (x + 0.044715 * torch.pow(x, 3.0))))


class Block(nn.Module):
    def __init__(self, hidden, heads, seq, dropout, written_gelu=False):
        super().__init__()
        self.written_gelu = written_gelu
        self.ln_1 = nn.LayerNorm(hidden)
        self.attn = CausalSelfAttention(hidden, heads, seq, dropout)
        self.ln_2 = nn.LayerNorm(hidden)
        self.c_fc = nn.Linear(hidden, 4 * hidden)
        self.c_proj = nn.Linear(4 * hidden, hidden)
        self.dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        h = self.c_fc(self.ln_2(x))
        h = new_gelu(h) if self.written_gelu else F.gelu(h, approximate="tanh")
        return x + self.dropout(self.c_proj(h))


class GPT(nn.Module):
    def __init__(self, vocab=64, seq=16, hidden=32, heads=4, layers=2,
                 dropout=0.0, written_gelu=False):
        super().__init__()
        self.wte = nn.Embedding(vocab, hidden)
        self.wpe = nn.Embedding(seq, hidden)
        self.drop = nn.Dropout(dropout)
        self.h = nn.ModuleList(Block(hidden, heads, seq, dropout, written_gelu)
                               for _ in range(layers))
        self.ln_f = nn.LayerNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        self.lm_head.weight = self.wte.weight  # tied
        for name, p in self.named_parameters():
            if name.endswith("weight") and p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        b, t = idx.size()
        pos = torch.arange(0, t, dtype=torch.long)
        x = self.drop(self.wte(idx) + self.wpe(pos))
        for block in self.h:
            x = block(x)
        return self.lm_head(self.ln_f(x))


def lm_loss(logits, targets):
    return F.cross_entropy(logits.view(-1, logits.size(-1)),
                           targets.view(-1))


def gpt():
    """The GPT the tests import (`MODULE:FACTORY` for the command)."""
    torch.manual_seed(0)
    return GPT()


def gpt_bytes():
    """A GPT over byte tokens (strata-run's text data), with dropout."""
    torch.manual_seed(0)
    return GPT(vocab=256, seq=16, hidden=32, heads=4, layers=2, dropout=0.1)


def gpt_bytes_new_gelu():
    """gpt_bytes with GELU written out (Hugging Face's GPT-2 has it so)."""
    torch.manual_seed(0)
    return GPT(vocab=256, seq=16, hidden=32, heads=4, layers=2, dropout=0.1,
               written_gelu=True)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        x = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)
        return x * self.weight


def rotate_half(x):
    x1, x2 = x[..., :x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def rotate_every_two(x):
    """GPT-J's (and Cohere's) rotation of interleaved pairs: strided slices,
    torch.stack and a flatten."""
    x1, x2 = x[..., ::2], x[..., 1::2]
    return torch.stack((-x2, x1), dim=-1).flatten(-2)


class LlamaAttention(nn.Module):
    """Causal self-attention with rotary embeddings. `interleaved`: GPT-J's
    form instead, the rotary pairs interleaved (rotate_every_two), the
    scores through torch.baddbmm with its alpha as the scale, and the output
    projection written as x @ W.T."""

    def __init__(self, hidden, heads, seq, theta=10000.0, interleaved=False):
        super().__init__()
        self.interleaved = interleaved
        self.heads, self.head_dim = heads, hidden // heads
        self.q_proj = nn.Linear(hidden, hidden, bias=False)
        self.k_proj = nn.Linear(hidden, hidden, bias=False)
        self.v_proj = nn.Linear(hidden, hidden, bias=False)
        self.o_proj = nn.Linear(hidden, hidden, bias=False)
        inv_freq = 1.0 / theta ** (torch.arange(0, self.head_dim, 2).float()
                                   / self.head_dim)
        freqs = torch.outer(torch.arange(seq).float(), inv_freq)
        emb = freqs.repeat_interleave(2, dim=-1) if interleaved else \
            torch.cat((freqs, freqs), dim=-1)
        self.register_buffer("cos", emb.cos(), persistent=False)
        self.register_buffer("sin", emb.sin(), persistent=False)
        self.register_buffer("mask", torch.full((seq, seq), float("-inf"))
                             .triu(1), persistent=False)

    def forward(self, x):
        B, T, C = x.shape
        q = self.q_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(x).view(B, T, self.heads, self.head_dim).transpose(1, 2)
        cos, sin = self.cos[:T], self.sin[:T]
        rotate = rotate_every_two if self.interleaved else rotate_half
        q = q * cos + rotate(q) * sin
        k = k * cos + rotate(k) * sin
        if self.interleaved:
            flat = (B * self.heads, T, self.head_dim)
            scores = torch.baddbmm(
                torch.zeros(flat[0], T, T), q.reshape(flat),
                k.reshape(flat).transpose(1, 2), beta=0,
                alpha=1 / math.sqrt(self.head_dim)).view(B, self.heads, T, T)
        else:
            scores = q @ k.transpose(2, 3) / math.sqrt(self.head_dim)
        probs = F.softmax(scores + self.mask[:T, :T], dim=-1)
        y = (probs @ v).transpose(1, 2).reshape(B, T, C)
        if self.interleaved:
            return y @ self.o_proj.weight.T
        return self.o_proj(y)


class LlamaBlock(nn.Module):
    def __init__(self, hidden, heads, seq, intermediate, interleaved=False):
        super().__init__()
        self.input_layernorm = RMSNorm(hidden)
        self.self_attn = LlamaAttention(hidden, heads, seq,
                                        interleaved=interleaved)
        self.post_attention_layernorm = RMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)

    def forward(self, x):
        x = x + self.self_attn(self.input_layernorm(x))
        h = self.post_attention_layernorm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))


class Llama(nn.Module):
    def __init__(self, vocab=64, seq=16, hidden=32, heads=4, layers=2,
                 intermediate=64, interleaved=False):
        super().__init__()
        # Token 0 pads (its row gets no gradient).
        self.embed_tokens = nn.Embedding(vocab, hidden, padding_idx=0)
        self.layers = nn.ModuleList(
            LlamaBlock(hidden, heads, seq, intermediate, interleaved)
            for _ in range(layers))
        self.norm = RMSNorm(hidden)
        self.lm_head = nn.Linear(hidden, vocab, bias=False)
        for p in self.parameters():
            if p.dim() == 2:
                nn.init.normal_(p, std=0.02)

    def forward(self, idx):
        x = self.embed_tokens(idx)
        for layer in self.layers:
            x = layer(x)
        return self.lm_head(self.norm(x))


def llama():
    torch.manual_seed(0)
    return Llama()


def llama_interleaved():
    """The LLaMA-style decoder with GPT-J's interleaved rotary pairs."""
    torch.manual_seed(0)
    return Llama(interleaved=True)


def llama_bytes():
    """A LLaMA-style decoder over byte tokens (strata-run's text data)."""
    torch.manual_seed(0)
    return Llama(vocab=256)
