#!/usr/bin/env python3
"""TRL side of bench/dpo_vs_trl.sh: the data both implementations train on,
and trl.DPOTrainer's step time on it. Run with the project's .venv (torch,
transformers, trl, peft, datasets, tokenizers), on the CPU.

  dpo_trl.py make DIR
      DIR/base/: a random Llama of the anchor's shape (4 layers, hidden 256,
      MLP 688, 4 heads, 4 KV heads, 512 positions, untied head, fp32, seed 0)
      saved by transformers' save_pretrained, its vocabulary a byte-level BPE
      tokenizer's (4096 entries: specials <|bos|> <|eos|> <|pad|> at ids 0-2,
      a post-processor that puts <|bos|> before every sequence) trained by
      the `tokenizers` library on the pairs' text. DIR/pairs.jsonl: 64
      preference records {"prompt", "chosen", "rejected"} of deterministic
      English-like text (seed 0); each prompt ends with "\\n" and each
      completion starts on a word, so prompt and completion tokenize the same
      apart as together; BOS + prompt + completion + EOS is 150-250 tokens.
  dpo_trl.py run DIR MODE STEPS THREADS [METHOD]
      METHOD dpo (the default) trains DIR/base on DIR/pairs.jsonl with
      trl.DPOTrainer as below; orpo with trl.experimental.orpo.ORPOTrainer
      (beta, the paper's lambda, 0.1) and simpo with
      trl.experimental.cpo.CPOTrainer (loss_type simpo, beta 2.0, gamma 1.0,
      cpo_alpha 0), neither with a reference, and kto with trl.KTOTrainer
      (loss_type kto, beta 0.1, weights 1; the pairs unpaired by TRL, 16
      rows a micro-batch, so the same 8 pairs a step; its reference as
      DPO's), otherwise the same. For dpo:
      trains DIR/base on DIR/pairs.jsonl with trl.DPOTrainer for STEPS + 2
      optimizer steps (MODE full: the reference a copy TRL loads; MODE lora:
      PEFT LoRA r 16, alpha 32, no dropout, on the seven projections of each
      block, the reference the base with the adapters off): fp32, sigmoid
      loss, beta 0.1, 8 pairs a step, no accumulation, AdamW lr 1e-5
      constant, no gradient checkpointing, torch.set_num_threads(THREADS).
      Each optimizer step is timed from Trainer's on_step_begin to its
      on_step_end (forward, backward, clipping, optimizer; not the batch's
      fetch and collation before it, nor logging after it); the first 2 are
      warm-up. Prints one JSON line: {"impl": "trl", "mode", "step_seconds"
      (mean), "steps", "tokens_per_step" (mean input_ids cells, padding
      included, as tailor-runner's "tokens"), "torch", "trl"}. Everything
      else goes to stderr.
"""
import contextlib
import json
import os
import random
import sys
import tempfile
import time

# Before torch and the HF libraries load: no GPU, no network, no telemetry.
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
VOCAB = 4096
PAIRS = 64
WARMUP = 2
MIN_TOKENS, MAX_TOKENS = 150, 250
LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]

# The frequent words of the text; the rarer ones are made from SYLLABLES, so
# that the BPE trainer has enough distinct words to fill VOCAB entries.
WORDS = ("the of and to a in is that it for was on are as with his they at be this have from or one had by "
         "but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more "
         "write go see number no way could people my than first water been call who oil its now find long "
         "down day did get come made may part over new sound take only little work know place year live me "
         "back give most very after thing our just name good sentence man think say great where help through "
         "much before line right too mean old any same tell boy follow came want show also around form three "
         "small set put end does another well large must big even such because turn here why ask went men "
         "read need land different home us move try kind hand picture again change off play spell air away "
         "animal house point page letter mother answer found study still learn should world high").split()
SYLLABLES = ("ba be bi bo bu ca ce co cu da de di do du fa fe fi fo ga ge go ha he hi ho ja jo ka ke ki ko la "
             "le li lo lu ma me mi mo mu na ne ni no nu pa pe pi po pu ra re ri ro ru sa se si so su ta te ti "
             "to tu va ve vi vo wa we wi za ze zo ber con den fal gar ish ing ment ness ous tion ter ver").split()


def vocabulary(rng):
    words = list(WORDS)
    seen = set(words)
    while len(words) < 2500:
        w = "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))
        if w not in seen:
            seen.add(w)
            words.append(w)
    return words


def text(rng, words, weights, n):
    """About n words in sentences of 5-14, the first capitalised, some commas."""
    out = []
    while len(out) < n:
        k = rng.randint(5, 14)
        sentence = rng.choices(words, weights, k=k)
        sentence[0] = sentence[0].capitalize()
        if k > 8 and rng.random() < 0.5:
            sentence[k // 2] += ","
        sentence[-1] += rng.choice([".", ".", ".", "?", "!"])
        out.extend(sentence)
    return " ".join(out)


def make_pairs():
    rng = random.Random(0)
    words = vocabulary(rng)
    weights = [1.0 / (i + 1) ** 0.8 for i in range(len(words))]  # Zipf-like
    pairs = []
    for i in range(PAIRS):
        prompt = f"Question {i + 1}: " + text(rng, words, weights, rng.randint(50, 75)) + "\n"
        chosen = text(rng, words, weights, rng.randint(60, 100))
        rejected = text(rng, words, weights, rng.randint(60, 100))
        pairs.append({"prompt": prompt, "chosen": chosen, "rejected": rejected})
    return pairs


def make(root):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    base = os.path.join(root, "base")
    os.makedirs(base, exist_ok=True)
    pairs = make_pairs()

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=VOCAB, special_tokens=[BOS, EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator([p[k] for p in pairs for k in ("prompt", "chosen", "rejected")], trainer)
    bos_id, eos_id, pad_id = (tok.token_to_id(t) for t in (BOS, EOS, PAD))
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos_id)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                            pad_token=PAD).save_pretrained(base)

    # Check the folder as transformers (and so TRL) reloads it.
    loaded = AutoTokenizer.from_pretrained(base)
    if (loaded.bos_token_id, loaded.eos_token_id, loaded.pad_token_id) != (bos_id, eos_id, pad_id):
        sys.exit("dpo_trl.py: the reloaded tokenizer's special ids differ from the trained ones")
    lengths = []
    for p in pairs:
        for completion in (p["chosen"], p["rejected"]):
            whole = loaded(p["prompt"] + completion)["input_ids"]
            apart = loaded(p["prompt"])["input_ids"] + loaded(completion, add_special_tokens=False)["input_ids"]
            if whole != apart or whole[0] != bos_id or eos_id in whole:
                sys.exit(f"dpo_trl.py: {p['prompt']!r} + {completion!r} tokenizes differently together")
            lengths.append(len(whole) + 1)  # + EOS
    if min(lengths) < MIN_TOKENS or max(lengths) > MAX_TOKENS:
        sys.exit(f"dpo_trl.py: rows of {min(lengths)}-{max(lengths)} tokens, expected {MIN_TOKENS}-{MAX_TOKENS}")
    print(f"dpo_trl.py: vocabulary {len(loaded)}, {PAIRS} pairs, rows of {min(lengths)}-{max(lengths)} tokens "
          f"(mean {sum(lengths) / len(lengths):.0f})", file=sys.stderr)

    config = LlamaConfig(hidden_size=256, intermediate_size=688, num_hidden_layers=4, num_attention_heads=4,
                         num_key_value_heads=4, vocab_size=len(loaded), max_position_embeddings=512,
                         rms_norm_eps=1e-5, tie_word_embeddings=False, attention_dropout=0.0,
                         bos_token_id=bos_id, eos_token_id=eos_id, pad_token_id=pad_id)
    torch.manual_seed(0)
    LlamaForCausalLM(config).to(torch.float32).save_pretrained(base, safe_serialization=True)

    with open(os.path.join(root, "pairs.jsonl"), "w") as f:
        for p in pairs:
            f.write(json.dumps(p) + "\n")


def run(root, mode, steps, threads, method="dpo"):
    torch.set_num_threads(threads)
    import datasets
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import DPOConfig, DPOTrainer

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()

    class StepTimer(TrainerCallback):
        """Each optimizer step's seconds and input cells (padding included)."""

        def __init__(self):
            self.seconds, self.tokens = [], []
            self.t0 = self.seen = None

        def on_step_begin(self, args, state, control, **kw):
            self.seen = state.num_input_tokens_seen
            self.t0 = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            self.seconds.append(time.perf_counter() - self.t0)
            self.tokens.append(state.num_input_tokens_seen - self.seen)

    class CellCounter:
        """ORPO's and CPO's batches have no input_ids for Trainer to count:
        each collated batch's cells, both completions' rows padded to the
        batch's longest (as they concatenate them), in order."""

        def __init__(self, collator):
            self.collator, self.cells = collator, []

        def __call__(self, features):
            batch = self.collator(features)
            longest = max(batch["chosen_input_ids"].shape[1], batch["rejected_input_ids"].shape[1])
            self.cells.append(2 * batch["chosen_input_ids"].shape[0] * longest)
            return batch

    base = os.path.join(root, "base")
    total = steps + WARMUP
    timer = StepTimer()
    with tempfile.TemporaryDirectory(prefix="dpo_trl.") as scratch, \
            contextlib.redirect_stdout(sys.stderr):  # anything the trainer prints goes to stderr
        pairs = datasets.load_dataset("json", data_files=os.path.join(root, "pairs.jsonl"), split="train",
                                      cache_dir=os.path.join(scratch, "datasets"))
        common = dict(
            output_dir=os.path.join(scratch, "out"),
            learning_rate=1e-5, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
            per_device_train_batch_size=8, gradient_accumulation_steps=1, max_steps=total,
            bf16=False, fp16=False, use_cpu=True,
            # TRL turns checkpointing on by default; transformers 5 names it activation_checkpointing
            # (gradient_checkpointing, which DPOConfig defaults to True, is its deprecated alias).
            activation_checkpointing=False, gradient_checkpointing=False,
            include_num_input_tokens_seen="all", logging_steps=1, report_to=[], save_strategy="no",
            dataloader_num_workers=0, disable_tqdm=True, seed=42, data_seed=42)
        model = AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
        peft_config = None
        if mode == "lora":
            from peft import LoraConfig
            peft_config = LoraConfig(r=16, lora_alpha=32, lora_dropout=0.0, target_modules=LORA_TARGETS,
                                     bias="none", task_type="CAUSAL_LM")
        tokenizer = AutoTokenizer.from_pretrained(base)
        counter = None
        if method == "dpo":
            # ref_model None: TRL loads a frozen copy of the model (full), or turns
            # the adapters off for the reference's forward (LoRA).
            args = DPOConfig(loss_type=["sigmoid"], beta=0.1, max_length=None, **common)
            trainer = DPOTrainer(model=model, ref_model=None, args=args, train_dataset=pairs,
                                 processing_class=tokenizer, peft_config=peft_config, callbacks=[timer])
        elif method == "kto":
            # Each pair is two rows: 16 rows a micro-batch are Tailor's 8 pairs.
            from trl import KTOConfig, KTOTrainer
            args = KTOConfig(loss_type="kto", beta=0.1, desirable_weight=1.0, undesirable_weight=1.0,
                             max_length=1024, **{**common, "per_device_train_batch_size": 16})
            trainer = KTOTrainer(model=model, ref_model=None, args=args, train_dataset=pairs,
                                 processing_class=tokenizer, peft_config=peft_config, callbacks=[timer])
        else:
            import warnings
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # "experimental" warnings on import
                from trl.experimental.cpo import CPOConfig, CPOTrainer
                from trl.experimental.orpo import ORPOConfig, ORPOTrainer
            if method == "orpo":
                args = ORPOConfig(beta=0.1, max_length=1024, remove_unused_columns=False, **common)
                cls = ORPOTrainer
            else:
                args = CPOConfig(loss_type="simpo", beta=2.0, simpo_gamma=1.0, cpo_alpha=0.0, max_length=1024,
                                 remove_unused_columns=False, **common)
                cls = CPOTrainer
            trainer = cls(model=model, args=args, train_dataset=pairs, processing_class=tokenizer,
                          peft_config=peft_config, callbacks=[timer])
            counter = CellCounter(trainer.data_collator)
            trainer.data_collator = counter
        core = trainer.model.get_base_model() if hasattr(trainer.model, "get_base_model") else trainer.model
        if core.is_activation_checkpointing:
            sys.exit("dpo_trl.py: activation checkpointing is on; the comparison runs without it")
        trainer.train()
        if torch.get_num_threads() != threads:
            print(f"warning: torch threads changed to {torch.get_num_threads()} during training", file=sys.stderr)

    if len(timer.seconds) != total:
        sys.exit(f"dpo_trl.py: timed {len(timer.seconds)} steps, expected {total}")
    timed, cells = timer.seconds[WARMUP:], timer.tokens[WARMUP:]
    if counter is not None:
        cells = counter.cells[WARMUP:total]
    print(json.dumps({"impl": "trl", "mode": mode, "method": method, "step_seconds": round(sum(timed) / len(timed), 4),
                      "steps": len(timed), "tokens_per_step": round(sum(cells) / len(cells), 1),
                      "torch": torch.__version__, "trl": trl.__version__}))


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
        return
    if len(sys.argv) in (6, 7) and sys.argv[1] == "run":
        root, mode, steps, threads = sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
        method = sys.argv[6] if len(sys.argv) == 7 else "dpo"
        if method not in ("dpo", "orpo", "simpo", "kto"):
            sys.exit(f"dpo_trl.py: METHOD is dpo, orpo, simpo or kto, not {method!r}")
        if mode not in ("full", "lora"):
            sys.exit(f"dpo_trl.py: unknown mode {mode} (full or lora)")
        if steps < 1 or threads < 1:
            sys.exit("dpo_trl.py: STEPS and THREADS must be at least 1")
        run(root, mode, steps, threads, method)
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
