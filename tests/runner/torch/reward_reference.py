#!/usr/bin/env python3
"""The Hugging Face side of Tailor's reward-model tests: TRL's RewardTrainer
on a tiny sequence classifier, and transformers' AutoModelForSequenceClassification
scoring the folder Tailor exports. Run with the project's .venv, on the CPU.

  reward_reference.py make DIR
      dpo_reference.py's DIR/base/ (a tiny Llama with a BPE tokenizer whose
      pad token <|pad|> is not its EOS) and DIR/pairs.jsonl (8 pairs), and
      DIR/reward_base/: that Llama loaded by AutoModelForSequenceClassification
      with one label (its body as saved, its score head initialised by
      transformers under seed 0, lm_head dropped) and config.pad_token_id
      the tokenizer's pad, saved with the tokenizer files; and
      DIR/margin_pairs.jsonl, the same pairs each with a "margin" (MARGINS).
  reward_reference.py run DIR MICRO:ACCUM[:CENTER|:margin]...
      for each case, writes DIR/reward_MICROxACCUM.json (with CENTER,
      DIR/reward_MICROxACCUM_cCENTER.json and TRL's
      center_rewards_coefficient CENTER; with "margin",
      DIR/reward_MICROxACCUM_margin.json, trained on DIR/margin_pairs.jsonl,
      whose "margin" column TRL's loss reads): trl.RewardTrainer on
      DIR/reward_base over DIR/pairs.jsonl (AdamW lr 1e-3 constant, betas
      0.9/0.95, eps 1e-8, no weight decay, gradients clipped to norm 1, MICRO
      pairs per micro-batch, ACCUM micro-batches a step, MICRO * ACCUM = 8,
      so every step sees every pair once), 20 steps: "steps", one entry per
      optimizer step with TRL's logged loss, accuracy, margin, min_reward,
      mean_reward, max_reward and grad_norm (before clipping); "tokens", per
      pair in file order the chosen_ids and rejected_ids TRL trained on.
  reward_reference.py run_lora DIR MICRO:ACCUM...
      as run, beside LoRA: DIR/lora_init/ first (once), PEFT's SEQ_CLS
      adapter over DIR/reward_base on every linear of the blocks (r 8,
      lora_alpha 16, no dropout, PEFT's initialisation under seed 0, the
      score saved whole), then for each case DIR/reward_lora_MICROxACCUM.json:
      trl.RewardTrainer on that adapter loaded trainable (PeftModel), the
      same data, optimizer and metrics as run.
  reward_reference.py score FOLDER PAIRS OUT [ADAPTER]
      loads FOLDER with AutoTokenizer and AutoModelForSequenceClassification
      (fp32), and with ADAPTER PEFT's adapter over it (PeftModel, a SEQ_CLS
      task whose score is saved whole), scores every pair of PAIRS (a
      .jsonl) as TRL tokenizes it (prompt + completion + the EOS text) in
      one batch padded on the right, and writes OUT: {"chosen": [...],
      "rejected": [...]} (with ADAPTER also its "task_type" and
      "modules_to_save").

What TRL 1.16's RewardTrainer does with this data, which the runner matches:
  - chosen = prompt + chosen + eos_token (the text), tokenized with the
    tokenizer's defaults (so <|bos|> first); likewise rejected;
  - the model pools each row at its last token that is not the pad token
    (transformers' sequence classifiers), here the EOS;
  - the loss is the mean over the micro-batch's pairs of
    -log sigmoid(r_chosen - r_rejected - margin) (margin 0 without the
    column), plus with center_rewards_coefficient
    c, c times the mean of (r_chosen + r_rejected)^2; logged metrics are the means over
    the step's micro-batches of each micro-batch's value (min_reward and
    max_reward too: per micro-batch extremes, averaged).
"""
import json
import os
import sys
import tempfile

# dpo_reference sets the environment (no GPU, no network) before torch loads.
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import dpo_reference  # noqa: E402
import torch  # noqa: E402

STEPS = dpo_reference.STEPS
PAIRS_PER_STEP = dpo_reference.PAIRS_PER_STEP
METRICS = ["loss", "accuracy", "margin", "min_reward", "mean_reward", "max_reward", "grad_norm"]
# Each pair's margin in DIR/margin_pairs.jsonl, in file order: integers and
# fractions, zero and negative ones.
MARGINS = [0.5, 1, 0, 2.25, -0.5, 1.5, 0.25, 3]


def make(root):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    dpo_reference.make(root)
    base = os.path.join(root, "base")
    out = os.path.join(root, "reward_base")
    tok = AutoTokenizer.from_pretrained(base)
    if tok.pad_token_id is None or tok.pad_token_id == tok.eos_token_id:
        sys.exit("reward_reference.py: the base tokenizer needs a pad token of its own")
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=1, dtype=torch.float32)
    model.config.pad_token_id = tok.pad_token_id
    model.save_pretrained(out, safe_serialization=True)
    tok.save_pretrained(out)
    with open(os.path.join(root, "pairs.jsonl")) as f:
        pairs = [json.loads(line) for line in f if line.strip()]
    if len(pairs) != len(MARGINS):
        sys.exit(f"reward_reference.py: {len(pairs)} pairs for {len(MARGINS)} margins")
    with open(os.path.join(root, "margin_pairs.jsonl"), "w") as f:
        for pair, margin in zip(pairs, MARGINS):
            f.write(json.dumps({**pair, "margin": margin}) + "\n")


LORA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def make_lora_init(root):
    """DIR/lora_init/: PEFT's SEQ_CLS adapter over DIR/reward_base as PEFT
    initialises it (B zero), the score whole."""
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    out = os.path.join(root, "lora_init")
    if os.path.isdir(out):
        return out
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(os.path.join(root, "reward_base"), dtype=torch.float32)
    config = LoraConfig(r=8, lora_alpha=16, lora_dropout=0.0, target_modules=LORA_TARGETS, task_type="SEQ_CLS",
                        modules_to_save=["score"])
    get_peft_model(model, config).save_pretrained(out)
    return out


def run(root, micro, accum, out, center=None, lora=False, margins=False):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import RewardConfig, RewardTrainer

    dpo_reference.quiet_and_deterministic()
    base = os.path.join(root, "reward_base")
    adapter = make_lora_init(root) if lora else None
    with tempfile.TemporaryDirectory() as scratch:
        pairs = dpo_reference.load_pairs(root, scratch)
        if margins:
            import datasets
            pairs = datasets.load_dataset("json", data_files=os.path.join(root, "margin_pairs.jsonl"),
                                          split="train", cache_dir=os.path.join(scratch, "datasets"))
        args = RewardConfig(max_length=None, center_rewards_coefficient=center,
                            **dpo_reference.trainer_args(scratch, micro, accum))
        model = AutoModelForSequenceClassification.from_pretrained(base, dtype=torch.float32)
        if adapter is not None:
            from peft import PeftModel
            model = PeftModel.from_pretrained(model, adapter, is_trainable=True)
        trainer = RewardTrainer(model=model, args=args, train_dataset=pairs,
                                processing_class=AutoTokenizer.from_pretrained(base))
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.train()

    steps = []
    for entry in trainer.state.log_history:
        if "loss" in entry:
            steps.append({"step": entry["step"], **{k: float(entry[k]) for k in METRICS}})
    if [s["step"] for s in steps] != list(range(1, STEPS + 1)):
        sys.exit(f"reward_reference.py: TRL logged steps {[s['step'] for s in steps]}, expected 1..{STEPS}")
    tokens = [{k: list(row[k]) for k in ("chosen_ids", "rejected_ids")} for row in trainer.train_dataset]
    with open(out, "w") as f:
        json.dump({"micro_batch": micro, "accumulation": accum, "steps": steps, "tokens": tokens}, f, indent=1)


def score(folder, pairs_path, out, adapter=None):
    import transformers
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    transformers.logging.set_verbosity_error()
    tok = AutoTokenizer.from_pretrained(folder)
    model = AutoModelForSequenceClassification.from_pretrained(folder, dtype=torch.float32).eval()
    extra = {}
    if adapter is not None:
        from peft import PeftConfig, PeftModel
        config = PeftConfig.from_pretrained(adapter)
        extra = {"task_type": str(config.task_type), "modules_to_save": sorted(config.modules_to_save or [])}
        model = PeftModel.from_pretrained(model, adapter).eval()
    if model.config.num_labels != 1:
        sys.exit(f"reward_reference.py: {folder} has {model.config.num_labels} labels, expected 1")
    if model.config.pad_token_id is None:
        sys.exit(f"reward_reference.py: {folder}'s config.json has no pad_token_id")
    if tok.pad_token is None:
        tok.pad_token = tok.eos_token
    with open(pairs_path) as f:
        pairs = [json.loads(line) for line in f if line.strip()]
    texts = [p["prompt"] + p[which] + tok.eos_token for which in ("chosen", "rejected") for p in pairs]
    batch = tok(texts, return_tensors="pt", padding=True)
    with torch.no_grad():
        scores = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits.squeeze(-1)
    n = len(pairs)
    with open(out, "w") as f:
        json.dump({"chosen": scores[:n].tolist(), "rejected": scores[n:].tolist(), **extra}, f)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "run_lora":
        root = sys.argv[2]
        for case in sys.argv[3:]:
            micro, accum = (int(p) for p in case.split(":"))
            if micro * accum != PAIRS_PER_STEP:
                sys.exit(f"reward_reference.py: MICRO * ACCUM must be {PAIRS_PER_STEP}, got {micro} * {accum}")
            run(root, micro, accum, os.path.join(root, f"reward_lora_{micro}x{accum}.json"), lora=True)
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        root = sys.argv[2]
        for case in sys.argv[3:]:
            parts = case.split(":")
            if len(parts) not in (2, 3) or not all(p.isdigit() for p in parts[:2]):
                sys.exit(f"reward_reference.py: {case!r} is not MICRO:ACCUM[:CENTER|:margin]")
            micro, accum = int(parts[0]), int(parts[1])
            if micro < 1 or accum < 1 or micro * accum != PAIRS_PER_STEP:
                sys.exit(f"reward_reference.py: MICRO * ACCUM must be {PAIRS_PER_STEP}, got {micro} * {accum}")
            margins = len(parts) == 3 and parts[2] == "margin"
            center = float(parts[2]) if len(parts) == 3 and not margins else None
            name = f"reward_{micro}x{accum}" + (f"_c{parts[2]}" if center is not None else "") + \
                ("_margin" if margins else "")
            run(root, micro, accum, os.path.join(root, name + ".json"), center, margins=margins)
        return
    if len(sys.argv) in (5, 6) and sys.argv[1] == "score":
        score(sys.argv[2], sys.argv[3], sys.argv[4], sys.argv[5] if len(sys.argv) == 6 else None)
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
