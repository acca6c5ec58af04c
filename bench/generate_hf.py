#!/usr/bin/env python3
"""transformers' side of bench/generate_vs_hf.sh, on the same torch.

  generate_hf.py make DIR SIZE    a random Llama (SIZE small: the anchor's 4
                                  layers, hidden 256, vocab 4096; medium: 12
                                  layers, hidden 768, 12 heads over 4 KV heads,
                                  vocab 32000) saved to DIR/SIZE/ without EOS, and
                                  DIR/prompt.json (32 ids)
  generate_hf.py run DIR SIZE NEW THREADS REPEATS
                                  greedy generate() of NEW tokens, batch 1,
                                  SDPA attention, a warm-up first; prints one
                                  JSON line: the median seconds of the prompt's
                                  forward (max_new_tokens=1) and of the whole
                                  generation, and the ids
"""
import json
import os
import statistics
import sys
import time

import torch

SIZES = {
    "small": dict(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                  num_key_value_heads=4, vocab_size=4096),
    "medium": dict(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                   num_key_value_heads=4, vocab_size=32000),
}


def make(root, size):
    from transformers import LlamaConfig, LlamaForCausalLM
    config = LlamaConfig(max_position_embeddings=2048, bos_token_id=None, eos_token_id=None, pad_token_id=None,
                         tie_word_embeddings=False, **SIZES[size])
    torch.manual_seed(0)
    model = LlamaForCausalLM(config)
    model.generation_config.eos_token_id = None
    model.save_pretrained(os.path.join(root, size), safe_serialization=True)
    g = torch.Generator().manual_seed(1)
    with open(os.path.join(root, "prompt.json"), "w") as f:
        json.dump(torch.randint(10, 4096, (32,), generator=g).tolist(), f)


def run(root, size, new, threads, repeats):
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(root, size), dtype=torch.float32,
                                                 attn_implementation="sdpa").eval()
    with open(os.path.join(root, "prompt.json")) as f:
        ids = torch.tensor([json.load(f)])

    def timed(n):
        t = time.perf_counter()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=n,
                                 min_new_tokens=n, do_sample=False, pad_token_id=0)
        return time.perf_counter() - t, out[0, ids.size(1):].tolist()

    timed(8)  # warm-up
    prompt = statistics.median(timed(1)[0] for _ in range(repeats))
    runs = [timed(new) for _ in range(repeats)]
    total = statistics.median(r[0] for r in runs)
    print(json.dumps({"prompt_seconds": prompt, "total_seconds": total, "ids": runs[0][1],
                      "torch": torch.__version__, "transformers": __import__("transformers").__version__}))


if __name__ == "__main__":
    if sys.argv[1] == "make":
        make(sys.argv[2], sys.argv[3])
    else:
        run(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6]))
