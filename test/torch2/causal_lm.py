"""A Hugging Face causal language model with its next-token loss: the module
that test/torch2/hf_models.py and bench/hf_step_time.py import into Strata
and train with PyTorch."""

import torch


class CausalLM(torch.nn.Module):
    """logits -> the mean next-token cross-entropy over the batch."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, tokens, targets):
        logits = self.model(input_ids=tokens, use_cache=False).logits
        return torch.nn.functional.cross_entropy(
            logits.reshape(-1, logits.size(-1)), targets.reshape(-1))
