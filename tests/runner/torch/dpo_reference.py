#!/usr/bin/env python3
"""The TRL side of Tailor's preference-training tests: runs Hugging Face TRL's
DPOTrainer and KTOTrainer (and its experimental ORPOTrainer and CPOTrainer
for ORPO and SimPO) on a tiny model so the runner's per-step numbers can be compared
with TRL's. Run with the project's .venv (trl, datasets, transformers on the
same torch), on the CPU.

  dpo_reference.py make DIR
      DIR/base/: a tiny random Llama (2 layers, 64 wide, 4 heads over 2 KV
      heads, untied head, fp32, seed 0) saved by transformers' save_pretrained,
      with a byte-level BPE tokenizer trained by the `tokenizers` library on a
      small English corpus: specials <|bos|>, <|eos|>, <|pad|> (ids 0, 1, 2, as
      config.json's bos/eos/pad_token_id), a post-processor that puts <|bos|>
      before every sequence and adds no EOS. DIR/pairs.jsonl: 8 preference
      records {"prompt", "chosen", "rejected"} as plain text; each prompt ends
      on a non-space and each completion starts with a space, so prompt and
      completion tokenize the same apart as together. DIR/base/chat_template.jinja
      (turns between <|bos|>role and <|eos|>) and DIR/chat_pairs.jsonl: 4
      conversational pairs ("prompt" a list of turns, some with a system turn
      or an earlier exchange; "chosen" and "rejected" an assistant turn each).
      DIR/feedback.jsonl: 12 unpaired KTO examples {prompt, completion,
      label} of the pairs (every chosen completion desirable, every second
      pair's rejected one undesirable); DIR/chat_feedback.jsonl: 8 of the
      conversational pairs (completion a list of one assistant turn).
  dpo_reference.py kto DIR ORDER OUT
      trains DIR/base with trl.KTOTrainer on the pairs of DIR/pairs.jsonl
      unpaired in the order the JSON file ORDER gives: {"loss_type": "kto" or
      "apo_zero_unpaired", "micro": pairs per micro-batch, "accum", "rows":
      [[pair, chosen], ...]}, every row of every micro-batch of the 20 steps
      in Tailor's order (a micro-batch's chosen rows, then its rejected
      rows), each a KTO example {prompt, completion, label}. KTOTrainer reads
      them in that order (train_sampling_strategy sequential), 2 * micro rows
      per micro-batch, and pairs each row's prompt with the previous row's
      completion within its micro-batch for the KL estimate, as Tailor does;
      beta 0.1, weights 1, the reference a frozen copy, the rest as `run`.
      Unpaired examples instead: "rows" [{prompt, completion, label}, ...],
      "micro" rows per micro-batch, and optionally "desirable_weight" and
      "undesirable_weight".
      Writes OUT: "steps" with TRL's logged loss, rewards/{chosen,rejected,
      margins}, logps/{chosen,rejected}, kl and grad_norm per step.
  dpo_reference.py peft DIR OUT
      DIR/start_adapter/: a PEFT LoRA adapter over DIR/base (r 4, alpha 8, no
      dropout, the seven projections; B drawn from normal(0, 0.05), seed 1,
      so it moves the model); then trains it 20 steps with trl.DPOTrainer
      as `run` does sigmoid:8:1, the model a PeftModel over it (trainable)
      and ref_model None, so TRL copies the starting adapter into a frozen
      "ref" adapter that scores the reference. Writes OUT as `run` writes
      its steps.
  dpo_reference.py run DIR CASE...
      for each CASE, LOSS_TYPE:MICRO:ACCUM[:LABEL_SMOOTHING] (e.g. ipo:4:2,
      robust:8:1:0.1), in one process (the imports are most of the time),
      writes DIR/LOSS_TYPE_MICROxACCUM.json: trains DIR/base on
      DIR/pairs.jsonl with trl.DPOTrainer (full fine-tuning, the reference a
      frozen copy TRL loads itself; LOSS_TYPE one of LOSS_TYPES, beta 0.1,
      optionally followed by +F_DIVERGENCE, TRL's f_divergence_type, as in
      sigmoid+js_divergence, whose file keeps the name;
      AdamW lr 1e-3 constant, betas 0.9/0.95, eps 1e-8, no
      weight decay, gradients clipped to norm 1; MICRO pairs per micro-batch,
      ACCUM micro-batches per step with MICRO * ACCUM = 8, so every step sees
      every pair once and data order cannot matter) for 20 steps, and writes
      "steps", one entry per optimizer step with TRL's logged loss,
      rewards/{chosen,rejected,accuracies,margins}, logps/{chosen,rejected}
      and grad_norm (before clipping); "tokens", per pair in file order the
      prompt_ids, chosen_ids and rejected_ids TRL trained on.
      CASE orpo:8:1 trains with trl.experimental.orpo.ORPOTrainer (its beta,
      the paper's lambda, 0.1) and simpo:8:1 with
      trl.experimental.cpo.CPOTrainer (loss_type simpo, beta 2.0, simpo_gamma
      1.0, cpo_alpha 0: pure SimPO; simpo:8:1:0.1 with label_smoothing 0.1;
      cpo_simpo:8:1 with cpo_alpha 1.0, its "steps" adding nll_loss;
      alphapo:8:1 with alpha 0.25, AlphaPO's reward shape),
      neither with a reference, the rest as
      above; their "steps" add ORPO's nll_loss, log_odds_ratio and
      log_odds_chosen, and "tokens" come from their own tokenization
      (chosen_input_ids less prompt_input_ids, and so on).
      The CASE "chat" trains nothing: DIR/chat_tokens.json holds the
      prompt_ids, chosen_ids and rejected_ids DPOTrainer makes of
      DIR/chat_pairs.jsonl with the folder's chat template.
  dpo_reference.py options DIR CASES
      for each case of the JSON file CASES, a list of {"name", "loss_type"
      (a list), "micro", "accum"} with optionally "loss_weights", "ld_alpha"
      and "use_weighting" (DPOConfig's keys of those names), trains DIR/base
      with trl.DPOTrainer as `run` does and writes DIR/NAME.json as `run`
      writes its file.
  dpo_reference.py kto_chat_tokens DIR
      writes DIR/kto_chat_tokens.json: the prompt_ids, completion_ids and
      label KTOTrainer makes of each record of DIR/chat_feedback.jsonl.

What TRL 1.16 does with this data, which the runner must match:
  - it appends the EOS token's text ("<|eos|>") to chosen and rejected, then
    tokenizes prompt and prompt+completion with the tokenizer's defaults, so
    the post-processor's <|bos|> starts prompt_ids; the completion is what
    follows the common prefix of the two token lists;
  - the loss of a micro-batch is the mean over its pairs; with accumulation
    the logged loss is the mean of the micro-batch losses, and every other
    metric is the mean of its per-micro-batch means (equal micro-batches here,
    so both are the means over the step's 8 pairs);
  - log-probabilities are summed over completion tokens (EOS included); IPO
    divides each sequence's log-ratio by its completion length;
  - the optimizer steps even when every gradient is zero (hinge, once all
    margins pass 1/beta: from step 15 here), so Adam's moments keep moving
    the weights.
"""
import json
import os
import sys
import tempfile

# Before torch and the HF libraries load: no GPU, no network, no telemetry.
os.environ["CUDA_VISIBLE_DEVICES"] = ""
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_HUB_DISABLE_TELEMETRY", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")

import torch  # noqa: E402

BOS, EOS, PAD = "<|bos|>", "<|eos|>", "<|pad|>"
STEPS = 20
PAIRS_PER_STEP = 8
METRICS = ["loss", "rewards/chosen", "rewards/rejected", "rewards/accuracies", "rewards/margins",
           "logps/chosen", "logps/rejected", "grad_norm"]

PAIRS = [
    ("What color is the sky on a clear day?", " The sky is blue.", " The sky is green."),
    ("Name a fruit that is yellow:", " A banana is yellow.", " A carrot is yellow."),
    ("How many legs does a cat have?", " A cat has four legs.", " A cat has two wings."),
    ("Finish the sentence: the sun rises in the", " east every morning.", " west at midnight."),
    ("What do bees make?", " Bees make honey.", " Bees make bread."),
    ("Is water wet or dry?", " Water is wet.", " Water is dry and dusty."),
    ("Say hello politely:", " Hello, how are you today?", " Go away."),
    ("What is two plus two?", " Two plus two is four.", " It is five, I think."),
]

CHAT_TEMPLATE = ("{% for m in messages %}<|bos|>{{ m['role'] }}\n{{ m['content'] }}<|eos|>\n{% endfor %}"
                 "{% if add_generation_prompt %}<|bos|>assistant\n{% endif %}")

CHAT_PAIRS = [
    ([{"role": "user", "content": "What do bees make?"}], "Bees make honey.", "Bees make bread."),
    ([{"role": "system", "content": "Answer briefly."}, {"role": "user", "content": "Is water wet?"}],
     "Yes, water is wet.", "No."),
    ([{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hello, how are you today?"},
      {"role": "user", "content": "What is two plus two?"}], "Two plus two is four.", "It is five, I think."),
    ([{"role": "user", "content": "Name a yellow fruit."}], "A banana is yellow.", "A carrot."),
]

CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "A cat sat on the mat and looked at the birds in the tree.",
    "Bees make honey in the summer, and the honey is sweet.",
    "The sun rises in the east and sets in the west every day.",
    "Water is wet, the sky is blue, and the grass is green.",
    "Hello, how are you today? I am fine, thank you.",
    "Two plus two is four, and three plus three is six.",
    "What is your name? Where do you live? How old are you?",
    "She reads a book every morning before she goes to work.",
    "They walked to the market to buy bread, fruit and milk.",
]


LOSS_TYPES = ("sigmoid", "ipo", "hinge", "robust", "exo_pair", "nca_pair", "bco_pair", "sppo_hard",
              "apo_zero", "apo_down", "sigmoid_norm", "discopop")
# f_divergence_type values a DPO case may name after its loss ("sigmoid+js_divergence").
F_DIVERGENCES = ("reverse_kl", "forward_kl", "js_divergence", "alpha_divergence")
# Reference-free methods, each its own TRL trainer (cpo_simpo: CPOTrainer's
# simpo with cpo_alpha 1.0, "CPO-SimPO"; alphapo: its simpo with alpha 0.25).
METHODS = ("orpo", "simpo", "cpo_simpo", "alphapo")
ORPO_METRICS = ["nll_loss", "log_odds_ratio", "log_odds_chosen"]


def make(root):
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    base = os.path.join(root, "base")
    os.makedirs(base, exist_ok=True)

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=384, special_tokens=[BOS, EOS, PAD], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    lines = CORPUS + [p + c for p, chosen, rejected in PAIRS for c in (chosen, rejected)]
    tok.train_from_iterator(lines * 4, trainer)
    bos_id, eos_id, pad_id = (tok.token_to_id(t) for t in (BOS, EOS, PAD))
    tok.post_processor = processors.TemplateProcessing(single=f"{BOS} $A", pair=f"{BOS} $A {BOS} $B",
                                                       special_tokens=[(BOS, bos_id)])
    PreTrainedTokenizerFast(tokenizer_object=tok, bos_token=BOS, eos_token=EOS,
                            pad_token=PAD).save_pretrained(base)

    # Check the folder as transformers (and so TRL) reloads it.
    loaded = AutoTokenizer.from_pretrained(base)
    ids = loaded("hello")["input_ids"]
    if ids[0] != bos_id or eos_id in ids:
        sys.exit(f"dpo_reference.py: the reloaded tokenizer gives {ids} for 'hello' (BOS {bos_id}, EOS {eos_id})")
    if (loaded.bos_token_id, loaded.eos_token_id, loaded.pad_token_id) != (bos_id, eos_id, pad_id):
        sys.exit("dpo_reference.py: the reloaded tokenizer's special ids differ from the trained ones")
    for prompt, chosen, rejected in PAIRS:
        for completion in (chosen, rejected):
            whole = loaded(prompt + completion)["input_ids"]
            apart = loaded(prompt)["input_ids"] + loaded(completion, add_special_tokens=False)["input_ids"]
            if whole != apart:
                sys.exit(f"dpo_reference.py: {prompt!r} + {completion!r} tokenizes differently together")
            if len(whole) + 1 >= 60:
                sys.exit(f"dpo_reference.py: {prompt!r} + {completion!r} is {len(whole) + 1} tokens")

    config = LlamaConfig(hidden_size=64, intermediate_size=112, num_hidden_layers=2, num_attention_heads=4,
                         num_key_value_heads=2, vocab_size=(len(loaded) + 7) // 8 * 8, max_position_embeddings=256,
                         tie_word_embeddings=False, attention_dropout=0.0, bos_token_id=bos_id, eos_token_id=eos_id,
                         pad_token_id=pad_id)
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).to(torch.float32)
    model.save_pretrained(base, safe_serialization=True)

    with open(os.path.join(root, "pairs.jsonl"), "w") as f:
        for prompt, chosen, rejected in PAIRS:
            f.write(json.dumps({"prompt": prompt, "chosen": chosen, "rejected": rejected}) + "\n")
    with open(os.path.join(base, "chat_template.jinja"), "w") as f:
        f.write(CHAT_TEMPLATE)
    with open(os.path.join(root, "chat_pairs.jsonl"), "w") as f:
        for prompt, chosen, rejected in CHAT_PAIRS:
            f.write(json.dumps({"prompt": prompt, "chosen": [{"role": "assistant", "content": chosen}],
                                "rejected": [{"role": "assistant", "content": rejected}]}) + "\n")
    # Unpaired examples (KTO's labelled completions) made of the same pairs.
    with open(os.path.join(root, "feedback.jsonl"), "w") as f:
        for i, (prompt, chosen, rejected) in enumerate(PAIRS):
            f.write(json.dumps({"prompt": prompt, "completion": chosen, "label": True}) + "\n")
            if i % 2 == 1:
                f.write(json.dumps({"prompt": prompt, "completion": rejected, "label": False}) + "\n")
    with open(os.path.join(root, "chat_feedback.jsonl"), "w") as f:
        for prompt, chosen, rejected in CHAT_PAIRS:
            for completion, label in ((chosen, True), (rejected, False)):
                f.write(json.dumps({"prompt": prompt, "completion": [{"role": "assistant", "content": completion}],
                                    "label": label}) + "\n")


def reference_free_trainer(method, base, pairs, common, label_smoothing=0.0):
    """ORPOTrainer or CPOTrainer (SimPO, with `label_smoothing`) on DIR/base, as the C++ test configures Tailor."""
    import warnings

    from transformers import AutoTokenizer
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "experimental" warnings on import
        if method == "orpo":
            from trl.experimental.orpo import ORPOConfig, ORPOTrainer
            args = ORPOConfig(beta=0.1, max_length=1024, remove_unused_columns=False, **common)
            cls = ORPOTrainer
        else:
            from trl.experimental.cpo import CPOConfig, CPOTrainer
            args = CPOConfig(loss_type="simpo", beta=2.0, simpo_gamma=1.0,
                             cpo_alpha=1.0 if method == "cpo_simpo" else 0.0,
                             alpha=0.25 if method == "alphapo" else 0.0,
                             label_smoothing=label_smoothing, max_length=1024,
                             remove_unused_columns=False, **common)
            cls = CPOTrainer
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32)
    return cls(model=model, args=args, train_dataset=pairs, processing_class=AutoTokenizer.from_pretrained(base))


def quiet_and_deterministic(root=None):
    """transformers and datasets without progress output or caches; torch seeded, one thread; with ROOT, TRL's
    log-probabilities in one vocabulary tile of ROOT/base's size."""
    import datasets
    import transformers
    import trl.trainer.utils

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()
    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    # DPOTrainer and KTOTrainer score tokens through a buffer 32,768 logits wide whatever the vocabulary, and
    # on the CPU they score every position: a buffer of tens of MB a forward for 384 logits a token (a 20-step
    # run took 2.6 s, 0.84 s with this). A tile as wide as the vocabulary is the same single tile and
    # the same arithmetic: every logged figure is bit-equal.
    if root is None:
        return
    with open(os.path.join(root, "base", "config.json")) as f:
        vocab = json.load(f)["vocab_size"]
    if vocab > trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE:
        sys.exit(f"dpo_reference.py: a vocabulary of {vocab} would take several tiles")
    trl.trainer.utils._CHUNKED_LOGPROB_CHUNK_SIZE = vocab


def load_pairs(root, scratch):
    """DIR/pairs.jsonl as a datasets.Dataset, cached under `scratch`; exactly PAIRS_PER_STEP pairs."""
    import datasets

    pairs = datasets.load_dataset("json", data_files=os.path.join(root, "pairs.jsonl"), split="train",
                                  cache_dir=os.path.join(scratch, "datasets"))
    if len(pairs) != PAIRS_PER_STEP:
        sys.exit(f"{os.path.basename(sys.argv[0])}: {root}/pairs.jsonl has {len(pairs)} pairs, "
                 f"expected {PAIRS_PER_STEP}")
    return pairs


def trainer_args(scratch, micro, accum):
    """The TrainingArguments every TRL run here shares (as the C++ tests configure Tailor)."""
    return dict(
        output_dir=os.path.join(scratch, "out"),
        learning_rate=1e-3, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        adam_beta1=0.9, adam_beta2=0.95, adam_epsilon=1e-8, weight_decay=0.0, max_grad_norm=1.0,
        per_device_train_batch_size=micro, gradient_accumulation_steps=accum, max_steps=STEPS,
        logging_steps=1, seed=42, data_seed=42, use_cpu=True, bf16=False, fp16=False,
        gradient_checkpointing=False, report_to=[], save_strategy="no", dataloader_drop_last=False,
        dataloader_num_workers=0, disable_tqdm=True)


def run(root, loss_type, micro, accum, out, label_smoothing=0.0, options=None):
    from transformers import AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import DPOConfig, DPOTrainer

    quiet_and_deterministic(root)
    base = os.path.join(root, "base")
    with tempfile.TemporaryDirectory() as scratch:
        pairs = load_pairs(root, scratch)
        common = trainer_args(scratch, micro, accum)
        if loss_type in METHODS:
            trainer = reference_free_trainer(loss_type, base, pairs, common, label_smoothing)
        else:
            extra = options or {}
            base_loss, _, f_divergence = ("", "", "") if options else loss_type.partition("+")
            args = DPOConfig(loss_type=extra.get("loss_type", [base_loss]), beta=0.1, label_smoothing=label_smoothing,
                             max_length=None, f_divergence_type=f_divergence or "reverse_kl",
                             loss_weights=extra.get("loss_weights"), ld_alpha=extra.get("ld_alpha"),
                             use_weighting=extra.get("use_weighting", False), **common)
            trainer = DPOTrainer(model=base, ref_model=None, args=args, train_dataset=pairs,
                                 processing_class=AutoTokenizer.from_pretrained(base))
        # Both print each log line to stdout; log_history keeps them.
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.train()

    steps = []
    metrics = METRICS + (ORPO_METRICS if loss_type == "orpo" else ["nll_loss"] if loss_type == "cpo_simpo" else [])
    for entry in trainer.state.log_history:
        if "loss" in entry:
            steps.append({"step": entry["step"], **{k: float(entry[k]) for k in metrics}})
    if [s["step"] for s in steps] != list(range(1, STEPS + 1)):
        sys.exit(f"dpo_reference.py: TRL logged steps {[s['step'] for s in steps]}, expected 1..{STEPS}")
    if loss_type in METHODS:
        # Their rows are whole sequences (BOS + prompt + completion + EOS).
        tokens = []
        for row in trainer.train_dataset:
            prompt = list(row["prompt_input_ids"])
            entry = {"prompt_ids": prompt}
            for which in ("chosen", "rejected"):
                ids = list(row[f"{which}_input_ids"])
                if ids[:len(prompt)] != prompt:
                    sys.exit(f"dpo_reference.py: {loss_type}'s {which} row does not start with its prompt")
                entry[f"{which}_ids"] = ids[len(prompt):]
            tokens.append(entry)
    else:
        tokens = [{k: list(row[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")}
                  for row in trainer.train_dataset]
    with open(out, "w") as f:
        json.dump({"loss_type": loss_type, "micro_batch": micro, "accumulation": accum,
                   "steps": steps, "tokens": tokens}, f, indent=1)


KTO_METRICS = ["loss", "rewards/chosen", "rewards/rejected", "rewards/margins", "logps/chosen", "logps/rejected",
               "kl", "grad_norm"]


def kto(root, order_file, out):
    import datasets
    from transformers import AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import KTOConfig, KTOTrainer

    quiet_and_deterministic(root)
    with open(order_file) as f:
        order = json.load(f)
    micro, accum, loss_type = order["micro"], order["accum"], order["loss_type"]
    rows = order["rows"]
    unpaired = bool(rows) and isinstance(rows[0], dict)
    per_device = micro if unpaired else 2 * micro
    if len(rows) != STEPS * accum * per_device:
        sys.exit(f"dpo_reference.py: {order_file} holds {len(rows)} rows, expected {STEPS * accum * per_device}")
    base = os.path.join(root, "base")
    with tempfile.TemporaryDirectory() as scratch:
        pairs = load_pairs(root, scratch)
        examples = {"prompt": [], "completion": [], "label": []}
        for row in rows:
            if unpaired:
                prompt, completion, label = row["prompt"], row["completion"], row["label"]
            else:
                pair, chosen = row
                prompt, completion, label = pairs[pair]["prompt"], pairs[pair]["chosen" if chosen else "rejected"], chosen
            examples["prompt"].append(prompt)
            examples["completion"].append(completion)
            examples["label"].append(bool(label))
        data = datasets.Dataset.from_dict(examples)
        args = KTOConfig(loss_type=loss_type, beta=0.1, desirable_weight=order.get("desirable_weight", 1.0),
                         undesirable_weight=order.get("undesirable_weight", 1.0),
                         max_length=1024, train_sampling_strategy="sequential",
                         **trainer_args(scratch, per_device, accum))
        trainer = KTOTrainer(model=base, ref_model=None, args=args, train_dataset=data,
                             processing_class=AutoTokenizer.from_pretrained(base))
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.train()
    metrics = [m for m in KTO_METRICS if loss_type == "kto" or m != "kl"]
    # A step without desirable (or undesirable) rows logs no rewards of that kind.
    steps = [{"step": e["step"], **{k: float(e[k]) for k in metrics if k in e}}
             for e in trainer.state.log_history if "loss" in e]
    if [s["step"] for s in steps] != list(range(1, STEPS + 1)):
        sys.exit(f"dpo_reference.py: TRL logged steps {[s['step'] for s in steps]}, expected 1..{STEPS}")
    with open(out, "w") as f:
        json.dump({"loss_type": loss_type, "micro_batch": micro, "accumulation": accum, "steps": steps}, f, indent=1)


def peft_run(root, out):
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import DPOConfig, DPOTrainer

    quiet_and_deterministic(root)
    base = os.path.join(root, "base")
    start = os.path.join(root, "start_adapter")
    config = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, bias="none", task_type="CAUSAL_LM",
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    adapted = get_peft_model(AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32), config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for name, param in adapted.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=generator) * 0.05)
    adapted.save_pretrained(start)
    torch.manual_seed(0)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, torch_dtype=torch.float32), start,
                                      is_trainable=True)
    with tempfile.TemporaryDirectory() as scratch:
        pairs = load_pairs(root, scratch)
        args = DPOConfig(loss_type=["sigmoid"], beta=0.1, max_length=None, **trainer_args(scratch, 8, 1))
        trainer = DPOTrainer(model=model, ref_model=None, args=args, train_dataset=pairs,
                             processing_class=AutoTokenizer.from_pretrained(base))
        if "ref" not in trainer.model.peft_config:
            sys.exit("dpo_reference.py: DPOTrainer made no frozen 'ref' adapter of the starting one")
        trainer.remove_callback(PrinterCallback)
        trainer.remove_callback(ProgressCallback)
        trainer.train()
    steps = [{"step": e["step"], **{k: float(e[k]) for k in METRICS}} for e in trainer.state.log_history if "loss" in e]
    if [s["step"] for s in steps] != list(range(1, STEPS + 1)):
        sys.exit(f"dpo_reference.py: TRL logged steps {[s['step'] for s in steps]}, expected 1..{STEPS}")
    with open(out, "w") as f:
        json.dump({"loss_type": "sigmoid", "micro_batch": 8, "accumulation": 1, "steps": steps}, f, indent=1)


def chat_tokens(root):
    """DPOTrainer's token ids of DIR/chat_pairs.jsonl (the trainer is built, not run)."""
    import datasets
    import transformers
    from transformers import AutoTokenizer
    from trl import DPOConfig, DPOTrainer

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()
    base = os.path.join(root, "base")
    with tempfile.TemporaryDirectory() as scratch:
        pairs = datasets.load_dataset("json", data_files=os.path.join(root, "chat_pairs.jsonl"), split="train",
                                      cache_dir=os.path.join(scratch, "datasets"))
        args = DPOConfig(output_dir=os.path.join(scratch, "out"), use_cpu=True, bf16=False, fp16=False,
                         max_length=None, gradient_checkpointing=False, report_to=[], save_strategy="no")
        trainer = DPOTrainer(model=base, ref_model=None, args=args, train_dataset=pairs,
                             processing_class=AutoTokenizer.from_pretrained(base))
        tokens = [{k: list(row[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")}
                  for row in trainer.train_dataset]
    with open(os.path.join(root, "chat_tokens.json"), "w") as f:
        json.dump({"tokens": tokens}, f, indent=1)


def kto_chat_tokens(root):
    """KTOTrainer's token ids of DIR/chat_feedback.jsonl (the trainer is built, not run)."""
    import datasets
    import transformers
    from transformers import AutoTokenizer
    from trl import KTOConfig, KTOTrainer

    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()
    base = os.path.join(root, "base")
    with tempfile.TemporaryDirectory() as scratch:
        data = datasets.load_dataset("json", data_files=os.path.join(root, "chat_feedback.jsonl"), split="train",
                                     cache_dir=os.path.join(scratch, "datasets"))
        args = KTOConfig(output_dir=os.path.join(scratch, "out"), use_cpu=True, bf16=False, fp16=False,
                         max_length=1024, per_device_train_batch_size=2, gradient_checkpointing=False,
                         report_to=[], save_strategy="no")
        trainer = KTOTrainer(model=base, ref_model=None, args=args, train_dataset=data,
                             processing_class=AutoTokenizer.from_pretrained(base))
        tokens = [{"prompt_ids": list(row["prompt_ids"]), "completion_ids": list(row["completion_ids"]),
                   "label": bool(row["label"])} for row in trainer.train_dataset]
    with open(os.path.join(root, "kto_chat_tokens.json"), "w") as f:
        json.dump({"tokens": tokens}, f, indent=1)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "make":
        make(sys.argv[2])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "peft":
        peft_run(sys.argv[2], sys.argv[3])
        return
    if len(sys.argv) == 5 and sys.argv[1] == "kto":
        kto(sys.argv[2], sys.argv[3], sys.argv[4])
        return
    if len(sys.argv) == 4 and sys.argv[1] == "options":
        with open(sys.argv[3]) as f:
            cases = json.load(f)
        for case in cases:
            unknown = set(case) - {"name", "loss_type", "micro", "accum", "loss_weights", "ld_alpha", "use_weighting"}
            if unknown or case["micro"] * case["accum"] != PAIRS_PER_STEP:
                sys.exit(f"dpo_reference.py: bad case {case} (unknown keys {sorted(unknown)}, or MICRO * ACCUM "
                         f"not {PAIRS_PER_STEP})")
            options = {k: case[k] for k in ("loss_type", "loss_weights", "ld_alpha", "use_weighting") if k in case}
            run(sys.argv[2], "+".join(case["loss_type"]), case["micro"], case["accum"],
                os.path.join(sys.argv[2], case["name"] + ".json"), options=options)
        return
    if len(sys.argv) == 3 and sys.argv[1] == "kto_chat_tokens":
        kto_chat_tokens(sys.argv[2])
        return
    if len(sys.argv) >= 4 and sys.argv[1] == "run":
        root = sys.argv[2]
        cases = []
        for case in sys.argv[3:]:
            if case == "chat":
                cases.append(("chat", 0, 0, 0.0))
                continue
            parts = case.split(":")
            if len(parts) not in (3, 4) or not parts[1].isdigit() or not parts[2].isdigit():
                sys.exit(f"dpo_reference.py: {case!r} is not LOSS_TYPE:MICRO:ACCUM[:LABEL_SMOOTHING]")
            loss_type, micro, accum = parts[0], int(parts[1]), int(parts[2])
            smoothing = float(parts[3]) if len(parts) == 4 else 0.0
            base_loss, _, f_divergence = loss_type.partition("+")
            if base_loss not in LOSS_TYPES + METHODS or (f_divergence and f_divergence not in F_DIVERGENCES):
                sys.exit(f"dpo_reference.py: unknown loss type {loss_type} ({', '.join(LOSS_TYPES + METHODS)}, "
                         f"a dpo one followed by +{'|'.join(F_DIVERGENCES)})")
            if micro < 1 or accum < 1 or micro * accum != PAIRS_PER_STEP:
                sys.exit(f"dpo_reference.py: MICRO * ACCUM must be {PAIRS_PER_STEP}, got {micro} * {accum}")
            cases.append((loss_type, micro, accum, smoothing))
        for loss_type, micro, accum, smoothing in cases:
            if loss_type == "chat":
                chat_tokens(root)
            else:
                run(root, loss_type, micro, accum, os.path.join(root, f"{loss_type}_{micro}x{accum}.json"), smoothing)
        return
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
