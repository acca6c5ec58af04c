#!/usr/bin/env python3
"""The plain PyTorch baseline on a CUDA GPU: the anchor's Llama
(../shared/bench/anchor_pytorch_llama.py, imported, not copied) trained on
cuda:0 the way a user would write it: autocast to bf16 (or fp32), AdamW,
optionally gradient checkpointing, and attention either as the anchor writes
it (materialised scores) or through F.scaled_dot_product_attention
(--sdpa, causal: flash attention on Hopper). Prints one JSON line with
tokens/s and the CUDA caching allocator's peak (max_memory_allocated), the
figure tailor-runner's metrics report as peak_bytes.
  pytorch_llama_cuda.py --anchor PATH [anchor's flags] [--sdpa]"""
import argparse
import importlib.util
import json
import sys
import time

import torch
import torch.nn.functional as F


def load_anchor(path):
    spec = importlib.util.spec_from_file_location("anchor", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def sdpa_forward(anchor):
    def forward(self, x, cos, sin, mask):
        b, t, _ = x.shape
        h = self.attn_norm(x)
        q = self.q_proj(h).view(b, t, self.h, self.hd).transpose(1, 2)
        k = self.k_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        v = self.v_proj(h).view(b, t, self.kv, self.hd).transpose(1, 2)
        q, k = anchor.rope(q, cos, sin), anchor.rope(k, cos, sin)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=self.kv != self.h)
        x = x + self.o_proj(y.transpose(1, 2).reshape(b, t, -1))
        h = self.mlp_norm(x)
        return x + self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))

    return forward


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--anchor", required=True)
    for k, v in dict(layers=4, hidden=256, heads=4, kv_heads=4, intermediate=688,
                     vocab=4096, seq=256, batch=8, steps=20, warmup=3, threads=2, accum=1).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--checkpointing", action="store_true")
    p.add_argument("--sdpa", action="store_true")
    a = p.parse_args()
    if not torch.cuda.is_available():
        sys.exit("pytorch_llama_cuda: no CUDA device")
    anchor = load_anchor(a.anchor)
    if a.sdpa:
        anchor.Block.forward = sdpa_forward(anchor)
    torch.manual_seed(0)
    dev = torch.device("cuda", 0)
    model = anchor.Llama(a).to(dev)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    n_params = sum(q.numel() for q in model.parameters())
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), device=dev)
    x, y = data[:, :-1], data[:, 1:]

    def step():
        for _ in range(a.accum):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
                logits = model(x)
            loss = F.cross_entropy(logits.float().view(-1, a.vocab), y.reshape(-1)) / a.accum
            loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss

    for _ in range(a.warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    tokens = a.steps * a.accum * a.batch * a.seq
    print(json.dumps({"impl": "pytorch-cuda" + ("-sdpa" if a.sdpa else ""), "torch": torch.__version__,
                      "device": torch.cuda.get_device_name(0), "params": n_params, "precision": a.precision,
                      "checkpointing": a.checkpointing, "tokens_per_second": round(tokens / dt, 1),
                      "step_seconds": round(dt / a.steps, 4), "final_loss": round(loss.item() * a.accum, 4),
                      "peak_bytes": torch.cuda.max_memory_allocated()}))


if __name__ == "__main__":
    main()
