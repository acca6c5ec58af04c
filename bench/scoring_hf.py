#!/usr/bin/env python3
"""The Python sides of bench/completions_batch.sh and
bench/completions_generate.sh, on the project's torch.

  scoring_hf.py make DIR          DIR/model/: a random Llama (12 layers,
                                  hidden 768, 12 heads over 4 KV heads, vocab
                                  32000, 110M parameters) with a byte-level
                                  BPE tokenizer; DIR/prompts.json: 64 prompts
                                  of MIN_LEN to MAX_LEN token ids (seeded;
                                  default 32 and 256)
  scoring_hf.py client URL DIR BATCH
                                  posts the prompts to URL (/v1/completions)
                                  BATCH to a request, as lm-eval's
                                  local-completions posts log-likelihood
                                  requests (echo, logprobs 1, max_tokens 1,
                                  temperature 0), one request after another;
                                  prints {"seconds", "sums"}: the wall time and
                                  each prompt's summed log-probability
  scoring_hf.py hf DIR BATCH THREADS
                                  what lm-eval's hf model does with the same
                                  prompts: transformers' forward in batches of
                                  BATCH, longest first, right-padded, each
                                  prompt's tokens scored by log_softmax; prints
                                  the same JSON
  scoring_hf.py generate URL DIR BATCH NEW
                                  posts the prompts' first GEN_PROMPTS (32)
                                  to URL BATCH to a request, as lm-eval's
                                  local-completions posts generative
                                  requests (max_tokens NEW, temperature 0),
                                  one request after another; prints
                                  {"seconds", "texts"}
  scoring_hf.py hf_generate DIR BATCH THREADS NEW
                                  what lm-eval's hf model does with them:
                                  transformers' generate() in batches of
                                  BATCH, left-padded, greedy, NEW tokens each;
                                  prints the same JSON, the texts decoded by
                                  the folder's tokenizer
"""
import json
import os
import sys
import time
import urllib.request

import torch


def make(root):
    from tokenizers import ByteLevelBPETokenizer
    from transformers import LlamaConfig, LlamaForCausalLM
    model_dir = os.path.join(root, "model")
    config = LlamaConfig(hidden_size=768, intermediate_size=2048, num_hidden_layers=12, num_attention_heads=12,
                         num_key_value_heads=4, vocab_size=32000, max_position_embeddings=2048, bos_token_id=None,
                         eos_token_id=None, pad_token_id=None, tie_word_embeddings=False)
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(model_dir, safe_serialization=True)
    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator([f"line {i} of some text to learn merges from" for i in range(200)], vocab_size=600,
                            special_tokens=["<|endoftext|>"])
    tok.save(os.path.join(model_dir, "tokenizer.json"))
    g = torch.Generator().manual_seed(1)
    low, high = int(os.environ.get("MIN_LEN", 32)), int(os.environ.get("MAX_LEN", 256))
    lengths = torch.randint(low, high + 1, (64,), generator=g).tolist()
    prompts = [torch.randint(0, 600, (n,), generator=g).tolist() for n in lengths]
    with open(os.path.join(root, "prompts.json"), "w") as f:
        json.dump(prompts, f)


def client(url, root, batch):
    with open(os.path.join(root, "prompts.json")) as f:
        prompts = json.load(f)
    sums = []
    start = time.time()
    for i in range(0, len(prompts), batch):
        body = {"prompt": prompts[i:i + batch], "max_tokens": 1, "temperature": 0, "echo": True, "logprobs": 1}
        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=3600) as response:
            reply = json.load(response)
        for j, choice in enumerate(reply["choices"]):
            lps = choice["logprobs"]["token_logprobs"]
            sums.append(sum(lps[1:len(prompts[i + j])]))  # the prompt's tokens after the first
    print(json.dumps({"seconds": time.time() - start, "sums": sums}))


def hf(root, batch, threads):
    from transformers import AutoModelForCausalLM
    torch.set_num_threads(threads)
    with open(os.path.join(root, "prompts.json")) as f:
        prompts = json.load(f)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(root, "model"), dtype=torch.float32).eval()
    order = sorted(range(len(prompts)), key=lambda i: -len(prompts[i]))
    sums = [0.0] * len(prompts)
    start = time.time()
    with torch.no_grad():
        for i in range(0, len(order), batch):
            rows = order[i:i + batch]
            longest = max(len(prompts[r]) for r in rows)
            ids = torch.zeros(len(rows), longest, dtype=torch.long)
            for j, r in enumerate(rows):
                ids[j, :len(prompts[r])] = torch.tensor(prompts[r])
            logp = torch.log_softmax(model(ids).logits.float(), -1)
            for j, r in enumerate(rows):
                n = len(prompts[r])
                sums[r] = logp[j, :n - 1].gather(1, ids[j, 1:n].unsqueeze(1)).sum().item()
    print(json.dumps({"seconds": time.time() - start, "sums": sums}))


def generative_prompts(root):
    with open(os.path.join(root, "prompts.json")) as f:
        return json.load(f)[:int(os.environ.get("GEN_PROMPTS", 32))]


def generate(url, root, batch, new):
    prompts = generative_prompts(root)
    texts = []
    start = time.time()
    for i in range(0, len(prompts), batch):
        body = {"prompt": prompts[i:i + batch], "max_tokens": new, "temperature": 0}
        request = urllib.request.Request(url, data=json.dumps(body).encode(),
                                         headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=3600) as response:
            reply = json.load(response)
        texts += [c["text"] for c in sorted(reply["choices"], key=lambda c: c["index"])]
    print(json.dumps({"seconds": time.time() - start, "texts": texts}))


def hf_generate(root, batch, threads, new):
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast
    torch.set_num_threads(threads)
    prompts = generative_prompts(root)
    model = AutoModelForCausalLM.from_pretrained(os.path.join(root, "model"), dtype=torch.float32).eval()
    tok = PreTrainedTokenizerFast(tokenizer_file=os.path.join(root, "model", "tokenizer.json"))
    texts = [""] * len(prompts)
    start = time.time()
    with torch.no_grad():
        for i in range(0, len(prompts), batch):
            rows = list(range(i, min(i + batch, len(prompts))))
            longest = max(len(prompts[r]) for r in rows)
            ids = torch.zeros(len(rows), longest, dtype=torch.long)
            mask = torch.zeros(len(rows), longest, dtype=torch.long)
            for j, r in enumerate(rows):
                n = len(prompts[r])
                ids[j, longest - n:] = torch.tensor(prompts[r])
                mask[j, longest - n:] = 1
            out = model.generate(input_ids=ids, attention_mask=mask, max_new_tokens=new, min_new_tokens=new,
                                 do_sample=False, pad_token_id=0)
            for j, r in enumerate(rows):
                texts[r] = tok.decode(out[j, longest:].tolist())
    print(json.dumps({"seconds": time.time() - start, "texts": texts}))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
    elif len(sys.argv) == 5 and sys.argv[1] == "client":
        client(sys.argv[2], sys.argv[3], int(sys.argv[4]))
    elif len(sys.argv) == 5 and sys.argv[1] == "hf":
        hf(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
    elif len(sys.argv) == 6 and sys.argv[1] == "generate":
        generate(sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5]))
    elif len(sys.argv) == 6 and sys.argv[1] == "hf_generate":
        hf_generate(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
