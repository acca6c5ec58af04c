#!/usr/bin/env python3
"""PyTorch's own data parallelism on the anchor's Llama, the baseline for
tailor-runner's ranks: DistributedDataParallel or FSDP2 (fully_shard) over
Gloo on this machine's CPU, N rank processes sharing the cores. Each rank
trains on global_batch / N sequences per step. Prints one JSON line: the
global tokens/s (rank 0's clock), the largest rank's peak RSS and the loss.

  ddp_llama.py --anchor ../shared/bench/anchor_pytorch_llama.py --mode ddp \
      --ranks 2 --layers 4 --hidden 256 --heads 4 --kv-heads 4 \
      --intermediate 688 --vocab 4096 --seq 256 --batch 8 --precision fp32
"""
import argparse, importlib.util, json, os, resource, socket, time
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F


def load_anchor(path):
    spec = importlib.util.spec_from_file_location("anchor", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def worker(rank, a, port, results):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(max(1, a.threads // a.ranks))
    dist.init_process_group("gloo", rank=rank, world_size=a.ranks)
    anchor = load_anchor(a.anchor)
    a.checkpointing = False
    torch.manual_seed(0)
    model = anchor.Llama(a)
    if a.mode == "ddp":
        from torch.nn.parallel import DistributedDataParallel
        model = DistributedDataParallel(model)
    else:
        from torch.distributed.fsdp import fully_shard
        for block in model.layers:
            fully_shard(block)
        fully_shard(model)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-4)
    per_rank = a.batch // a.ranks
    data = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=torch.Generator().manual_seed(1))
    x = data[rank * per_rank:(rank + 1) * per_rank, :-1]
    y = data[rank * per_rank:(rank + 1) * per_rank, 1:]

    def step():
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.precision == "bf16"):
            logits = model(x)
        loss = F.cross_entropy(logits.float().reshape(-1, a.vocab), y.reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.item()

    for _ in range(a.warmup):
        step()
    dist.barrier()
    t0 = time.perf_counter()
    for _ in range(a.steps):
        loss = step()
    dist.barrier()
    dt = time.perf_counter() - t0
    results[rank] = (dt, loss, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--anchor", required=True)
    p.add_argument("--mode", choices=["ddp", "fsdp2"], default="ddp")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    for k, v in dict(ranks=2, layers=4, hidden=256, heads=4, kv_heads=4, intermediate=688,
                     vocab=4096, seq=256, batch=8, steps=20, warmup=3, threads=2).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    a = p.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with mp.Manager() as m:
        results = m.dict()
        mp.spawn(worker, args=(a, port, results), nprocs=a.ranks, join=True)
        dt, loss, _ = results[0]
        rss = max(r[2] for r in results.values())
    print(json.dumps({"impl": a.mode, "ranks": a.ranks, "torch": torch.__version__, "precision": a.precision,
                      "tokens_per_second": round(a.steps * a.batch * a.seq / dt, 1),
                      "step_seconds": round(dt / a.steps, 4), "final_loss": round(loss, 4),
                      "peak_rss_bytes": rss}))


if __name__ == "__main__":
    main()
