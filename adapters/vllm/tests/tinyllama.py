"""A tiny random Llama + byte-level tokenizer written to a directory (no download)."""

from __future__ import annotations

from pathlib import Path


def build(out: Path, seed: int = 1234, max_positions: int = 1024) -> Path:
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    vocab = {ch: i for i, ch in enumerate(sorted(pre_tokenizers.ByteLevel.alphabet()))}
    vocab["<s>"], vocab["</s>"] = len(vocab), len(vocab) + 1
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token="<s>", eos_token="</s>").save_pretrained(out)
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab), hidden_size=128, intermediate_size=256, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=max_positions, initializer_range=0.5, bos_token_id=vocab["<s>"],
        eos_token_id=vocab["</s>"], torch_dtype="float32",
    )
    LlamaForCausalLM(config).save_pretrained(out)
    return out


def model_and_repo(tmp_path_factory, name: str):  # noqa: ANN001, ANN201 (pytest's factory)
    """For module fixtures (vLLM tests): a fresh temp dir, the tiny model in it and an empty agentsnap repository."""
    from agentsnap_core import Repo
    from agentsnap_core.testing.servers import need_module

    need_module("vllm")
    root = tmp_path_factory.mktemp(name)
    return root, build(root / "tiny"), Repo.init(root / "repo")
