"""Write a tiny Mixture-of-Experts checkpoint and its tokenizer, for a real engine to serve on a CPU.

    .venv-vllm/bin/python tools/tiny_moe.py DIR [--experts 8] [--top-k 2] [--layers 2]

Runs with the engine's interpreter: transformers, tokenizers and torch come with vLLM. Nothing is
fetched: the weights are random (seeded), and the tokenizer is a byte-level BPE trained here on a
few sentences, so any prompt tokenizes and every token decodes to text. The result is a Qwen3-MoE
model (``Qwen3MoeForCausalLM``), one of the families cockpit plans from its config.json.

Two limits of vLLM's CPU build shape it: the attention kernels need a head size of 64 or more
("Unsupported CPU attention configuration" on the first request otherwise), and the model's
vocabulary must be the tokenizer's, or the stream carries empty text for the ids it cannot decode.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

# What the tokenizer learns from: enough distinct words for a few hundred merges.
CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "Mixture of experts models route each token to a few experts.",
    "Tensor parallel splits every layer across the GPUs of a box.",
    "Expert parallel places whole experts on each GPU.",
    "Pipeline parallel gives each GPU a stage of consecutive layers.",
    "A benchmark sweeps concurrency and measures tokens per second.",
    "The key value cache holds the attention state of every running request.",
    "Weights load first, then the engine profiles memory and starts serving.",
    "0 1 2 3 4 5 6 7 8 9 10 100 1000 hello world, cockpit!",
]
VOCAB = 512  # the tokenizer's whole vocabulary, special tokens included; the model's too
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]


def tokenizer(vocab: int):
    """A byte-level BPE of exactly ``vocab`` tokens: the 256 bytes, the special tokens, merges."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS * 20, trainer=trainer)
    # Training stops when no pair is left to merge: pad with unused tokens so the size is exact.
    missing = vocab - tok.get_vocab_size()
    if missing > 0:
        tok.add_tokens([f"<|unused_{i}|>" for i in range(missing)])
    return tok


def write(out: Path, *, experts: int, top_k: int, layers: int, hidden: int, seed: int) -> None:
    import torch
    from transformers import PreTrainedTokenizerFast, Qwen3MoeConfig, Qwen3MoeForCausalLM

    out.mkdir(parents=True, exist_ok=True)
    tok = tokenizer(VOCAB)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok, eos_token="<|endoftext|>", pad_token="<|endoftext|>", bos_token=None
    )
    # A chat template, so /v1/chat/completions works too.
    fast.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    fast.save_pretrained(out)
    heads, kv_heads, head_dim = 4, 2, 64  # head_dim 64: the CPU attention kernels' smallest
    config = Qwen3MoeConfig(
        vocab_size=len(fast),
        hidden_size=hidden,
        intermediate_size=2 * hidden,
        moe_intermediate_size=hidden // 2,
        num_hidden_layers=layers,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        num_experts=experts,
        num_experts_per_tok=top_k,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        max_position_embeddings=4096,
        tie_word_embeddings=False,
        eos_token_id=fast.eos_token_id,
        bos_token_id=fast.eos_token_id,
        pad_token_id=fast.eos_token_id,
        torch_dtype="bfloat16",
    )
    torch.manual_seed(seed)
    model = Qwen3MoeForCausalLM(config).to(torch.bfloat16)
    model.save_pretrained(out, safe_serialization=True)
    # The generation defaults vLLM reads; no sampling surprises from a missing file.
    (out / "generation_config.json").write_text(
        json.dumps({"eos_token_id": fast.eos_token_id, "pad_token_id": fast.eos_token_id}) + "\n"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="write a tiny MoE checkpoint and tokenizer (no hub)")
    parser.add_argument("out", type=Path, help="the folder to write (created)")
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--top-k", type=int, default=2)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    try:
        write(
            args.out,
            experts=args.experts,
            top_k=args.top_k,
            layers=args.layers,
            hidden=args.hidden,
            seed=args.seed,
        )
    except ImportError as exc:
        print(
            f"tiny_moe: {exc.name} is missing: run this with the engine's Python (it brings transformers, "
            "tokenizers and torch), e.g. .venv-vllm/bin/python tools/tiny_moe.py DIR",
            file=sys.stderr,
        )
        return 2
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
