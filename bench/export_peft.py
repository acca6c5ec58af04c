#!/usr/bin/env python3
"""PEFT's side of bench/export_vs_peft.sh, on the same torch.

  export_peft.py make DIR SIZE   a random Llama (SIZE medium: 12 layers,
                                 hidden 768, GQA 12/4, vocab 32000, 110M;
                                 1b: TinyLlama-1.1B's shape, 22 layers, hidden
                                 2048, GQA 32/4, vocab 32000) saved to DIR/base
                                 in fp32, and DIR/adapter: a PEFT LoRA adapter
                                 (r 16 on every linear layer, non-zero B)
  export_peft.py merge DIR OUT [fp32]
                                 what a user runs without Tailor: the base
                                 loaded in fp32, the adapter merged with
                                 merge_and_unload(), cast to bf16 (or kept
                                 fp32) and saved with save_pretrained to OUT
  export_peft.py same A B        whether two folders' safetensors hold the same
                                 tensors bit for bit: prints {"equal": ..., "tensors": N}
"""
import json
import os
import sys

import torch

SIZES = {
    "medium": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                   num_key_value_heads=4, vocab_size=32000),
    "1b": dict(hidden_size=2048, intermediate_size=5632, num_hidden_layers=22, num_attention_heads=32,
               num_key_value_heads=4, vocab_size=32000),
}
TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make(root, size):
    from peft import LoraConfig, get_peft_model
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(max_position_embeddings=2048, tie_word_embeddings=False, torch_dtype="float32",
                         **SIZES[size])
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.save_pretrained(os.path.join(root, "base"), safe_serialization=True)
    lora = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules=TARGETS, init_lora_weights=False,
                                            task_type="CAUSAL_LM"))
    with torch.no_grad():
        for name, p in lora.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.02)
    lora.save_pretrained(os.path.join(root, "adapter"))


def merge(root, out, dtype="bf16"):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(os.path.join(root, "base"), dtype=torch.float32)
    merged = PeftModel.from_pretrained(base, os.path.join(root, "adapter")).merge_and_unload()
    (merged if dtype == "fp32" else merged.to(torch.bfloat16)).save_pretrained(out)


def tensors(folder):
    from safetensors.torch import load_file
    out = {}
    for f in sorted(os.listdir(folder)):
        if f.endswith(".safetensors"):
            out.update(load_file(os.path.join(folder, f)))
    return out


def same(a, b):
    x, y = tensors(a), tensors(b)
    equal = set(x) == set(y) and all(x[k].dtype == y[k].dtype and torch.equal(x[k], y[k]) for k in x)
    print(json.dumps({"equal": equal, "tensors": len(x)}))


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    elif len(sys.argv) in (4, 5) and sys.argv[1] == "merge":
        merge(*sys.argv[2:])
    elif len(sys.argv) == 4 and sys.argv[1] == "same":
        same(sys.argv[2], sys.argv[3])
    else:
        sys.exit(__doc__)
