"""Hugging Face transformers' GPT2LMHeadModel, LlamaForCausalLM,
Qwen2ForCausalLM, GemmaForCausalLM, Phi3ForCausalLM, GPTJForCausalLM and
CohereForCausalLM (small
configurations built from a config: nothing is downloaded), and a model
normalised by torch.nn.RMSNorm (aten.rms_norm, which torch.export keeps
whole), captured with torch.export on PyTorch 2.x, imported, and trained 20
AdamW steps by Strata and by PyTorch eager from the same weights and
batches; the losses must agree within 1e-4 relative. Optionally the imported GPT-2 also trains under
a strategy on 2 ranks (mpirun) with the single-rank losses.

usage: hf_models.py OUT_DIR          (run by test/torch2/run.sh)
"""

import os
import sys

import torch
import transformers
from transformers import (CohereConfig, CohereForCausalLM, GemmaConfig,
                          GemmaForCausalLM, GPT2Config, GPT2LMHeadModel,
                          GPTJConfig, GPTJForCausalLM, LlamaConfig,
                          LlamaForCausalLM, Phi3Config, Phi3ForCausalLM,
                          Qwen2Config, Qwen2ForCausalLM)

import strata.import_torch as importer

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "python"))
from causal_lm import CausalLM  # noqa: E402
from compare import compare, token_batches  # noqa: E402

out = sys.argv[1]
strategy = os.path.join(out, "adamw.yaml")
with open(strategy, "w") as f:
    f.write("optimizer: {type: adamw, learning_rate: 0.001}\n")


class RmsNormLM(torch.nn.Module):
    """Tokens -> embedding -> Linear -> nn.RMSNorm (PyTorch's default
    epsilon) -> SiLU -> logits: the mean next-token cross-entropy."""

    def __init__(self, vocab):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 32)
        self.proj = torch.nn.Linear(32, 32)
        self.norm = torch.nn.RMSNorm(32)
        self.head = torch.nn.Linear(32, vocab)

    def forward(self, tokens, targets):
        h = torch.nn.functional.silu(self.norm(self.proj(self.embed(tokens))))
        logits = self.head(h)
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


class GqaLM(torch.nn.Module):
    """Tokens -> embedding -> causal self-attention through
    F.scaled_dot_product_attention(enable_gqa=True): 4 query heads of 8
    reading one key and value head (multi-query attention) -> logits: the
    mean next-token cross-entropy."""

    def __init__(self, vocab):
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, 32)
        self.q = torch.nn.Linear(32, 32, bias=False)
        self.kv = torch.nn.Linear(32, 16, bias=False)
        self.o = torch.nn.Linear(32, 32, bias=False)
        self.head = torch.nn.Linear(32, vocab)

    def forward(self, tokens, targets):
        x = self.embed(tokens)
        b, t, _ = x.shape
        q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 1, 16).transpose(1, 2).split(8, dim=-1)
        a = torch.nn.functional.scaled_dot_product_attention(
            q, k, v, is_causal=True, enable_gqa=True)
        logits = self.head(x + self.o(a.transpose(1, 2).reshape(b, t, 32)))
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1))


def models(vocab):
    torch.manual_seed(0)
    yield "gpt2", GPT2LMHeadModel(GPT2Config(
        vocab_size=vocab, n_positions=16, n_embd=32, n_layer=2, n_head=4,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
        eos_token_id=0))
    torch.manual_seed(0)
    yield "llama", LlamaForCausalLM(LlamaConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
        max_position_embeddings=16, bos_token_id=0, eos_token_id=0))
    torch.manual_seed(0)
    yield "rmsnorm", RmsNormLM(vocab)
    torch.manual_seed(0)
    yield "gqa", GqaLM(vocab)
    # Other decoders of the LLaMA family, grouped-query attention each:
    # Qwen2 (biased q, k, v projections), Gemma (a padding token whose
    # embedding row gets no gradient, scaled embeddings, RMSNorm with
    # 1 + weight, tanh GELU), Phi-3 (fused q/k/v and gate/up projections
    # split with chunk, the rotary embedding over whole heads).
    small = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                 num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=16,
                 bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    yield "qwen2", Qwen2ForCausalLM(Qwen2Config(**small))
    torch.manual_seed(0)
    yield "gemma", GemmaForCausalLM(GemmaConfig(head_dim=8, pad_token_id=0,
                                                **small))
    torch.manual_seed(0)
    yield "phi3", Phi3ForCausalLM(Phi3Config(pad_token_id=0, **small))
    # Rotary embeddings over interleaved pairs (x[..., ::2], x[..., 1::2]:
    # strided slices, and torch.stack): GPT-J (a partial rotary dimension,
    # parallel attention and MLP, GELU written out) and Cohere (grouped
    # keys and values, a layer norm without bias, a scaled head).
    torch.manual_seed(0)
    yield "gptj", GPTJForCausalLM(GPTJConfig(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=16,
        rotary_dim=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
        bos_token_id=0, eos_token_id=0))
    torch.manual_seed(0)
    yield "cohere", CohereForCausalLM(CohereConfig(pad_token_id=0, **small))


def more_models(vocab):
    """Further decoder architectures, checked against PyTorch alone (the
    strategies of run.sh are those of the models above)."""
    T = transformers
    small = dict(vocab_size=vocab, hidden_size=32, intermediate_size=64,
                 num_hidden_layers=2, num_attention_heads=4,
                 num_key_value_heads=2, max_position_embeddings=16,
                 bos_token_id=0, eos_token_id=0)
    yield "mistral", lambda: T.MistralForCausalLM(T.MistralConfig(**small))
    yield "qwen3", lambda: T.Qwen3ForCausalLM(T.Qwen3Config(head_dim=8,
                                                            **small))
    yield "gemma2", lambda: T.Gemma2ForCausalLM(T.Gemma2Config(
        head_dim=8, pad_token_id=0, **small))
    yield "gemma3", lambda: T.Gemma3ForCausalLM(T.Gemma3TextConfig(
        head_dim=8, pad_token_id=0, **small))
    yield "olmo", lambda: T.OlmoForCausalLM(T.OlmoConfig(pad_token_id=0,
                                                         **small))
    yield "olmo2", lambda: T.Olmo2ForCausalLM(T.Olmo2Config(pad_token_id=0,
                                                            **small))
    yield "granite", lambda: T.GraniteForCausalLM(T.GraniteConfig(**small))
    yield "stablelm", lambda: T.StableLmForCausalLM(T.StableLmConfig(**small))
    yield "starcoder2", lambda: T.Starcoder2ForCausalLM(T.Starcoder2Config(
        residual_dropout=0.0, embedding_dropout=0.0, attention_dropout=0.0,
        **small))
    yield "smollm3", lambda: T.SmolLM3ForCausalLM(T.SmolLM3Config(
        pad_token_id=0, **small))
    yield "phi", lambda: T.PhiForCausalLM(T.PhiConfig(
        resid_pdrop=0.0, embd_pdrop=0.0, **small))
    padded = dict(small, pad_token_id=0)
    # Squared-ReLU MLPs (torch.square): Persimmon, Nemotron, Arcee.
    yield "persimmon", lambda: T.PersimmonForCausalLM(T.PersimmonConfig(
        hidden_dropout=0.0, attention_dropout=0.0, **padded))
    yield "nemotron", lambda: T.NemotronForCausalLM(T.NemotronConfig(
        **padded))
    yield "arcee", lambda: T.ArceeForCausalLM(T.ArceeConfig(**padded))
    yield "glm", lambda: T.GlmForCausalLM(T.GlmConfig(head_dim=8, **padded))
    yield "helium", lambda: T.HeliumForCausalLM(T.HeliumConfig(head_dim=8,
                                                               **padded))
    yield "exaone4", lambda: T.Exaone4ForCausalLM(T.Exaone4Config(**padded))
    yield "ernie4_5", lambda: T.Ernie4_5ForCausalLM(T.Ernie4_5Config(
        head_dim=8, **padded))
    yield "olmo3", lambda: T.Olmo3ForCausalLM(T.Olmo3Config(**padded))
    yield "seed_oss", lambda: T.SeedOssForCausalLM(T.SeedOssConfig(
        head_dim=8, attention_dropout=0.0, residual_dropout=0.0, **padded))
    plain = dict(vocab_size=vocab, num_hidden_layers=2,
                 num_attention_heads=4, max_position_embeddings=16,
                 bos_token_id=0, eos_token_id=0)
    yield "gpt_neox", lambda: T.GPTNeoXForCausalLM(T.GPTNeoXConfig(
        hidden_size=32, intermediate_size=64, hidden_dropout=0.0,
        attention_dropout=0.0, **plain))
    yield "opt", lambda: T.OPTForCausalLM(T.OPTConfig(
        hidden_size=32, ffn_dim=64, dropout=0.0, attention_dropout=0.0,
        pad_token_id=1, word_embed_proj_dim=32, **plain))
    yield "codegen", lambda: T.CodeGenForCausalLM(T.CodeGenConfig(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=16,
        n_ctx=16, rotary_dim=4, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0, bos_token_id=0, eos_token_id=0))
    yield "biogpt", lambda: T.BioGptForCausalLM(T.BioGptConfig(
        hidden_size=32, intermediate_size=64, hidden_dropout_prob=0.0,
        attention_probs_dropout_prob=0.0, pad_token_id=1, **plain))
    yield "mpt", lambda: T.MptForCausalLM(T.MptConfig(
        vocab_size=vocab, d_model=32, n_layers=2, n_heads=4, max_seq_len=16,
        resid_pdrop=0.0, emb_pdrop=0.0, bos_token_id=0, eos_token_id=0))
    yield "falcon", lambda: T.FalconForCausalLM(T.FalconConfig(
        hidden_size=32, hidden_dropout=0.0, attention_dropout=0.0, **plain))
    yield "gpt_bigcode", lambda: T.GPTBigCodeForCausalLM(T.GPTBigCodeConfig(
        vocab_size=vocab, n_embd=32, n_layer=2, n_head=4, n_positions=16,
        resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
        eos_token_id=0))


print("PyTorch %s, transformers %s" % (torch.__version__,
                                       transformers.__version__))
batches = token_batches(vocab=64, batch=4, seq=16, steps=20)


def check(name, wrapped):
    """Imports `wrapped` (run.sh reads NAME.mlir and NAME.safetensors) and
    trains it against PyTorch."""
    program = importer.import_module(wrapped, batches[0],
                                     input_names=["tokens", "targets"],
                                     capture="export")
    program.save(os.path.join(out, name + ".mlir"))
    weights = os.path.join(out, name + ".safetensors")
    program.save_weights(weights)
    print("== %s: %d parameters" % (name, len(program.weights)))
    compare(program, wrapped, None, batches, strategy, weights,
            name=name + ".mlir")


for name, model in models(64):
    check(name, model if isinstance(model, (RmsNormLM, GqaLM)) else
          CausalLM(model))

for name, make in more_models(64):
    torch.manual_seed(0)
    try:
        model = make()
    except AttributeError as e:  # an architecture this transformers lacks
        print("== %s: skipped (transformers %s: %s)"
              % (name, transformers.__version__, e))
        continue
    check(name, CausalLM(model))
