#!/usr/bin/env python3
"""Hugging Face Trainer baseline of bench/runner_vs_python.sh: what a user
would otherwise run instead of tailor-runner. Trains a transformers
LlamaForCausalLM (random init, seed 0) on random tokens with
transformers.Trainer, full fine-tune or PEFT LoRA, and prints one JSON line
with tokens/s, step time, final loss and peak RSS.

It takes the same flags and prints the same JSON keys as the plain-PyTorch
baseline ../shared/bench/anchor_pytorch_llama.py (plus lora_rank,
trainable_params and the transformers version); for the same flags the model
has the same architecture and parameter count.

  .venv/bin/python bench/hf_trainer_llama.py --layers 4 --hidden 256 --heads 4 \
      --kv-heads 4 --intermediate 688 --vocab 4096 --seq 256 --batch 8 \
      --precision bf16 --steps 20 --warmup 3 --threads 2 [--lora-rank 16]

Needs torch, transformers (5.x), accelerate and, for --lora-rank, peft
(the project's .venv). Only the JSON line goes to stdout; Trainer's logs
and warnings go to stderr.
"""
import argparse
import contextlib
import json
import resource
import sys
import tempfile
import time

import torch

LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    for k, v in dict(layers=4, hidden=256, heads=4, kv_heads=4, intermediate=688, vocab=4096,
                     seq=256, batch=8, steps=20, warmup=3, threads=2, accum=1, lora_rank=0).items():
        p.add_argument("--" + k.replace("_", "-"), type=int, default=v)
    p.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    p.add_argument("--checkpointing", action="store_true")
    a = p.parse_args()
    for k in ("layers", "hidden", "heads", "kv_heads", "intermediate", "vocab", "seq", "batch",
              "steps", "threads", "accum"):
        if getattr(a, k) < 1:
            p.error(f"--{k.replace('_', '-')} must be at least 1, got {getattr(a, k)}")
    if a.warmup < 0:
        p.error(f"--warmup must be at least 0, got {a.warmup}")
    if a.lora_rank < 0:
        p.error(f"--lora-rank must be 0 (full fine-tune) or positive, got {a.lora_rank}")
    if a.hidden % a.heads:
        p.error(f"--hidden {a.hidden} is not a multiple of --heads {a.heads}")
    if a.heads % a.kv_heads:
        p.error(f"--heads {a.heads} is not a multiple of --kv-heads {a.kv_heads}")
    if (a.hidden // a.heads) % 2:
        p.error(f"head dim {a.hidden // a.heads} (--hidden / --heads) must be even for RoPE")
    return a


class RandomTokens(torch.utils.data.Dataset):
    """`batch` fixed rows of random ids, cycled. With sequential sampling every
    micro-batch is exactly those rows, as the anchor trains on one fixed batch."""

    def __init__(self, rows, length):
        self.rows, self.length = rows, length

    def __len__(self):
        return self.length

    def __getitem__(self, i):
        ids = self.rows[i % len(self.rows)]
        # labels = input_ids: the model shifts them internally, so the forward pass
        # sees seq tokens (as the anchor's) and the loss covers seq - 1 targets per row.
        return {"input_ids": ids, "labels": ids}


def main():
    a = parse_args()
    torch.set_num_threads(a.threads)

    # Imported after the flags are checked and the threads set: bad flags fail
    # fast, and nothing runs on torch's default thread count.
    import transformers
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainerCallback, TrainingArguments

    transformers.logging.set_verbosity_warning()

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=a.vocab, hidden_size=a.hidden, intermediate_size=a.intermediate,
        num_hidden_layers=a.layers, num_attention_heads=a.heads, num_key_value_heads=a.kv_heads,
        max_position_embeddings=a.seq, rms_norm_eps=1e-5,
        # transformers 5 keeps rope_theta inside rope_parameters.
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0},
        tie_word_embeddings=False, attention_bias=False, mlp_bias=False,
        # Not generating: no KV cache.
        use_cache=False,
    )
    config._attn_implementation = "sdpa"
    model = LlamaForCausalLM(config)  # fp32 weights; bf16 is autocast, as the anchor does
    if a.lora_rank:
        from peft import LoraConfig, get_peft_model
        model = get_peft_model(model, LoraConfig(
            r=a.lora_rank, lora_alpha=2 * a.lora_rank, lora_dropout=0.0,
            target_modules=LORA_TARGETS, bias="none", task_type="CAUSAL_LM"))
    # params counts every parameter of the trained model (for LoRA the frozen
    # base plus the adapters, as PEFT's "all params"); trainable_params those
    # the optimizer updates.
    n_params = sum(q.numel() for q in model.parameters())
    n_trainable = sum(q.numel() for q in model.parameters() if q.requires_grad)

    total = a.warmup + a.steps
    gen = torch.Generator().manual_seed(0)
    # Drawn (batch, seq + 1) like the anchor's data; the model gets the first seq ids.
    rows = torch.randint(0, a.vocab, (a.batch, a.seq + 1), generator=gen)[:, : a.seq]
    # One epoch covers the whole run, so no epoch boundary lands inside the timed steps.
    data = RandomTokens(rows, a.batch * a.accum * total)

    class StepTimer(TrainerCallback):
        """Times the optimizer steps after warm-up; keeps the last step's loss."""

        def __init__(self):
            self.t0 = self.t1 = self.loss = None

        def on_step_begin(self, args, state, control, **kw):
            if a.warmup == 0 and state.global_step == 0:
                self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            # From the end of step `warmup` to the end of the last step: the
            # interval includes Trainer's per-step overhead (batch fetch and
            # collation, grad-norm, logging), which is part of what it costs.
            if state.global_step == a.warmup:
                self.t0 = time.perf_counter()
            elif state.global_step == total:
                self.t1 = time.perf_counter()

        def on_log(self, args, state, control, logs=None, **kw):
            if logs and "loss" in logs and state.global_step == total:
                self.loss = logs["loss"]

    timer = StepTimer()
    with tempfile.TemporaryDirectory(prefix="hf_trainer_llama.") as out_dir, \
            contextlib.redirect_stdout(sys.stderr):  # anything Trainer prints goes to stderr
        args = TrainingArguments(
            output_dir=out_dir,
            per_device_train_batch_size=a.batch,
            gradient_accumulation_steps=a.accum,
            max_steps=total,
            learning_rate=3e-4,
            lr_scheduler_type="constant",
            warmup_steps=0,
            weight_decay=0.0,
            optim="adamw_torch",
            # max_grad_norm=0 disables clipping, as the C++ side's grad_clip: 0.
            # Trainer 5.x still computes the grad norm every step for its logs.
            max_grad_norm=0.0,
            # On CPU, bf16=True makes accelerate wrap forward in torch.autocast("cpu", bfloat16).
            bf16=a.precision == "bf16",
            # activation_checkpointing is 5.x's name; gradient_checkpointing is its deprecated alias.
            # Non-reentrant torch.utils.checkpoint per decoder layer, as the anchor.
            activation_checkpointing=a.checkpointing,
            use_cpu=True,
            dataloader_num_workers=0,
            train_sampling_strategy="sequential",
            report_to="none",
            save_strategy="no",
            logging_strategy="steps",
            logging_steps=1,
            disable_tqdm=True,
            seed=0,
        )
        trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[timer])
        trainer.train()
        if torch.get_num_threads() != a.threads:
            print(f"warning: torch threads changed to {torch.get_num_threads()} during training",
                  file=sys.stderr)

    if timer.t0 is None or timer.t1 is None or timer.loss is None:
        sys.exit("hf_trainer_llama: Trainer stopped before the last step; no measurement")
    dt = timer.t1 - timer.t0
    tokens = a.steps * a.accum * a.batch * a.seq
    print(json.dumps({
        "impl": "hf-trainer-peft" if a.lora_rank else "hf-trainer",
        "torch": torch.__version__, "transformers": transformers.__version__,
        "params": n_params, "trainable_params": n_trainable,
        "precision": a.precision, "checkpointing": a.checkpointing, "lora_rank": a.lora_rank,
        "tokens_per_second": round(tokens / dt, 1), "step_seconds": round(dt / a.steps, 4),
        "final_loss": round(timer.loss, 4),
        "peak_rss_bytes": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))


if __name__ == "__main__":
    main()
