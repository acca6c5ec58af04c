#!/usr/bin/env python3
"""The Hugging Face side of tests/runner/torch/hf_interop_test.cpp, run with the
project's .venv (transformers, PEFT, safetensors on the same torch).

  hf_reference.py make DIR FAMILY...
      for each family, DIR/FAMILY/ gets: base/ (a tiny random model saved by
      transformers' save_pretrained, fp32, every norm and bias perturbed so a
      misplaced tensor shows), adapter/ (a PEFT LoRA adapter on every linear of
      the blocks, saved by PEFT, with non-zero B), and reference.safetensors:
      input_ids (2, 16), base_logits, base_loss (transformers' mean shifted
      cross-entropy), adapter_logits, bf16_logits (the base cast to bf16).
  hf_reference.py whole DIR FAMILY...
      as make, but adapter/ also trains the embedding and the head whole
      (PEFT's modules_to_save, by the family's module names), their trained
      copies moved away from the base's (a tied model's two copies alike, as
      one matrix holds them); reference.safetensors holds input_ids,
      base_logits and adapter_logits.
  hf_reference.py tokenizers DIR
      trains byte-level BPE tokenizers with the `tokenizers` library on a
      multilingual corpus (scripts, emoji, digits, whitespace runs, code,
      decomposed accents): DIR/gpt2/ (GPT-2's ByteLevel pre-tokenizer),
      DIR/llama3/ (Llama 3's Split regex + ByteLevel, ignore_merges,
      <|begin_of_text|>/<|end_of_text|> in tokenizer_config.json) and
      DIR/qwen2/ (Qwen2's NFC normalizer and regex, no BOS), each with
      tokenizer.json and ids.json: the library's ids of every line of
      DIR/lines.json, without special tokens.
  hf_reference.py nf4 DIR
      quantises weights with bitsandbytes' quantize_4bit (nf4, block 64,
      double quantisation) on the CPU: DIR/nf4.safetensors holds, for each
      case (fp32_, bf16_), the weight, bnb's packed codes, absmax codes, absmax
      offset, second-level scales and its dequantised weight; the same
      without double quantisation (plain_packed, plain_absmax,
      plain_dequantized); and code, bnb's signed 8-bit dynamic map.
  hf_reference.py torch_save DIR FAMILY...
      for each family, DIR/FAMILY/ gets folders as transformers 4 and PEFT
      saved them without safetensors (torch.save's zip): bin/ (config.json
      and pytorch_model.bin: the whole state_dict, tied matrices sharing
      their storage, one matrix stored as a transposed, non-contiguous
      view), sharded/ (the model in bf16 as pytorch_model-0000i-of-0000n.bin
      shards of at most 40 kB plus pytorch_model.bin.index.json) and
      adapter_bin/ (PEFT's adapter_model.bin); and reference.safetensors:
      input_ids and the logits transformers and PEFT give from each folder
      (bin_logits, sharded_logits, adapter_logits). DIR/refused/ gets files
      Tailor must refuse: legacy.bin (PyTorch's format before 1.6),
      hostile.bin (a pickle whose object calls os.system), checkpoint.bin (a
      dict of a state_dict and a step), deflated.bin (a state_dict whose
      records are compressed) and truncated.bin (the first half of one).
  hf_reference.py check DIR FAMILY...
      for each family, loads what Tailor wrote: DIR/FAMILY/export/ with
      AutoModelForCausalLM and DIR/FAMILY/tailor_adapter/ onto base/ with
      PeftModel.from_pretrained, runs tailor.safetensors' input_ids and compares
      with its export_logits and adapter_logits. Prints one line per check;
      exits 1 when one is off by more than the tolerance.
"""
import copy
import json
import os
import sys

import torch
from safetensors.torch import load_file, save_file

TOLERANCE = 1e-4  # max |a - b| / max |b|, fp32

# Small shapes with grouped-query heads where the family has them.
CONFIGS = {
    # Llama 3.1's RoPE scaling with a pretraining context of 128: of the head's
    # wavelengths (6, 20, 63, 199 ... positions) the first two are kept, 63 is
    # on the ramp and the rest are stretched, so every branch is compared.
    "llama": dict(model_type="llama", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=1024,
                  rope_theta=10000.0, rms_norm_eps=1e-5, tie_word_embeddings=False,
                  rope_scaling=dict(rope_type="llama3", factor=8.0, low_freq_factor=1.0, high_freq_factor=4.0,
                                    original_max_position_embeddings=128)),
    # A sliding window of 8 tokens over the 16-token inputs, as Mistral v0.1's 4096 over 32k.
    "mistral": dict(model_type="mistral", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=64,
                    rope_theta=1e6, sliding_window=8, tie_word_embeddings=False),
    # Linear RoPE scaling (position interpolation), factor 2.
    "qwen2": dict(model_type="qwen2", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=64,
                  rope_theta=1e6, tie_word_embeddings=False, use_sliding_window=False,
                  rope_scaling=dict(rope_type="linear", factor=2.0)),
    # Heads 32 wide over a 64-wide model (head_dim != hidden / heads), tied head.
    "qwen3": dict(model_type="qwen3", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                  num_attention_heads=4, num_key_value_heads=2, head_dim=32, vocab_size=300,
                  max_position_embeddings=64, rope_theta=1e6, tie_word_embeddings=True, use_sliding_window=False),
    # Four experts, two per token.
    "mixtral": dict(model_type="mixtral", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                    num_attention_heads=4, num_key_value_heads=2, num_local_experts=4, num_experts_per_tok=2,
                    vocab_size=300, max_position_embeddings=64, rope_theta=1e6, sliding_window=None,
                    tie_word_embeddings=False),
    # q/k/v and gate/up stored whole (qkv_proj, gate_up_proj); a window of 8.
    "phi3": dict(model_type="phi3", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, vocab_size=300, max_position_embeddings=64,
                 rope_theta=10000.0, sliding_window=8, tie_word_embeddings=False, bos_token_id=1, eos_token_id=2,
                 pad_token_id=0),
    # Heads 32 wide over a 64-wide model, scores scaled by 24^-1/2, layer 0
    # windowed to 8 tokens and layer 1 not; caps low enough that tanh bends
    # these small random scores and logits.
    "gemma2": dict(model_type="gemma2", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                   num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24,
                   vocab_size=300, max_position_embeddings=64, rope_theta=10000.0, sliding_window=8,
                   attn_logit_softcapping=0.2, final_logit_softcapping=0.3, tie_word_embeddings=True,
                   pad_token_id=None, bos_token_id=None, eos_token_id=None),
    # Six layers, the last global: the windowed ones rotate by base 100 and
    # the global one by 1e4 stretched 8x (linear, as Gemma 3 4B and up).
    "gemma3_text": dict(model_type="gemma3_text", hidden_size=64, intermediate_size=112, num_hidden_layers=6,
                        num_attention_heads=4, num_key_value_heads=2, head_dim=32, query_pre_attn_scalar=24,
                        vocab_size=300, max_position_embeddings=64, sliding_window=8,
                        rope_parameters={"full_attention": dict(rope_type="linear", factor=8.0, rope_theta=10000.0),
                                         "sliding_attention": dict(rope_type="default", rope_theta=100.0)},
                        tie_word_embeddings=True, pad_token_id=None, bos_token_id=None, eos_token_id=None),
    "gpt2": dict(model_type="gpt2", n_embd=64, n_inner=256, n_layer=2, n_head=4, vocab_size=300, n_positions=64,
                 resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0, eos_token_id=1),
    # Pythia's quarter of each head rotated (4 of 16 dimensions), q/k/v fused
    # head by head, the parallel residual; saved with transformers 5's
    # rope_parameters, here with a linear RoPE stretch (factor 2).
    "gpt_neox": dict(model_type="gpt_neox", hidden_size=64, intermediate_size=112, num_hidden_layers=2,
                     num_attention_heads=4, vocab_size=300, max_position_embeddings=64, rotary_pct=0.25,
                     rotary_emb_base=10000, rope_scaling=dict(rope_type="linear", factor=2.0),
                     tie_word_embeddings=False, bos_token_id=0, eos_token_id=1),
}
TARGETS = {
    "gpt2": ["c_attn", "c_proj", "c_fc"],
    "mixtral": ["q_proj", "k_proj", "v_proj", "o_proj"],  # the experts are not LoRA targets in Tailor
    "phi3": ["qkv_proj", "o_proj", "gate_up_proj", "down_proj"],
    "gpt_neox": ["query_key_value", "dense", "dense_h_to_4h", "dense_4h_to_h"],
}
LLAMA_TARGETS = ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]


def base_model(family=None, cfg=None, weight_scale=1.0):
    """A tiny random model of CONFIGS[family] (or of `cfg`), its matrices
    multiplied by `weight_scale`."""
    from transformers import AutoConfig, AutoModelForCausalLM
    cfg = dict(CONFIGS[family] if cfg is None else cfg)
    config = AutoConfig.for_model(cfg.pop("model_type"), **cfg)
    config._attn_implementation = "eager"
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:  # norms and biases: away from their 1 / 0 initialisation
                p.add_(torch.randn_like(p) * 0.1)
            elif weight_scale != 1.0:
                p.mul_(weight_scale)
    return model.eval()


def saved_base(root, family):
    """ROOT/FAMILY/base/ as transformers saves the family's tiny model: the
    folder, the model and the input ids (2, 16) both sides run."""
    out = os.path.join(root, family)
    os.makedirs(out, exist_ok=True)
    model = base_model(family)
    model.save_pretrained(os.path.join(out, "base"), safe_serialization=True)
    ids = torch.randint(0, CONFIGS[family]["vocab_size"], (2, 16), generator=torch.Generator().manual_seed(1))
    return out, model, ids


def make(root, family):
    from peft import LoraConfig, get_peft_model
    out, model, ids = saved_base(root, family)
    with torch.no_grad():
        base = model(ids, labels=ids)
        # The same model in bf16, as transformers runs it: what Tailor's bf16
        # forward is compared with ("within bf16's rounding").
        bf16_logits = copy.deepcopy(model).to(torch.bfloat16)(ids).logits.float()
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS.get(family, LLAMA_TARGETS),
                      init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    with torch.no_grad():
        adapted = peft_model(ids)
    save_file({"input_ids": ids.contiguous(), "base_logits": base.logits.contiguous(),
               "base_loss": base.loss.reshape(1).contiguous(), "adapter_logits": adapted.logits.contiguous(),
               "bf16_logits": bf16_logits.contiguous()},
              os.path.join(out, "reference.safetensors"))


# PEFT's modules_to_save names of each family's embedding and head.
WHOLE_MODULES = {"gpt2": ["wte", "lm_head"], "gpt_neox": ["embed_in", "lm_head"]}


def make_whole(root, family):
    from peft import LoraConfig, get_peft_model
    out, model, ids = saved_base(root, family)
    with torch.no_grad():
        base = model(ids)
    names = WHOLE_MODULES.get(family, ["embed_tokens", "lm_head"])
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS.get(family, LLAMA_TARGETS),
                      modules_to_save=names, init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora)
    copies = [p for n, p in peft_model.named_parameters() if ".modules_to_save." in n]
    assert len(copies) == 2, [n for n, _ in peft_model.named_parameters() if ".modules_to_save." in n]
    with torch.no_grad():
        step = torch.randn(copies[0].shape, generator=torch.Generator().manual_seed(2)) * 0.05
        for p in copies:
            p.add_(step if model.config.tie_word_embeddings else torch.randn_like(p) * 0.05)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    with torch.no_grad():
        adapted = peft_model(ids)
    save_file({"input_ids": ids.contiguous(), "base_logits": base.logits.contiguous(),
               "adapter_logits": adapted.logits.contiguous()}, os.path.join(out, "reference.safetensors"))


def torch_saved(root, family):
    import shutil
    from huggingface_hub import split_torch_state_dict_into_shards
    from peft import LoraConfig, PeftModel, get_peft_model
    from transformers import AutoModelForCausalLM
    out, model, ids = saved_base(root, family)
    base = os.path.join(out, "base")
    # transformers 4's .bin: torch.save of the state_dict, which keeps tied
    # matrices as one storage; one matrix saved as a transposed view.
    state = model.state_dict()
    name = next(n for n, t in state.items() if t.dim() == 2 and t.shape[0] != t.shape[1])
    state[name] = state[name].t().contiguous().t()
    assert not state[name].is_contiguous()
    os.makedirs(os.path.join(out, "bin"))
    shutil.copy(os.path.join(base, "config.json"), os.path.join(out, "bin"))
    torch.save(state, os.path.join(out, "bin", "pytorch_model.bin"))
    # Shards in bf16, named and indexed as transformers 4 wrote them.
    sharded = os.path.join(out, "sharded")
    os.makedirs(sharded)
    shutil.copy(os.path.join(base, "config.json"), sharded)
    half = {n: t.to(torch.bfloat16) for n, t in model.state_dict().items()}
    split = split_torch_state_dict_into_shards(half, filename_pattern="pytorch_model{suffix}.bin",
                                              max_shard_size=40_000)
    assert len(split.filename_to_tensors) > 1
    for file, names in split.filename_to_tensors.items():
        torch.save({n: half[n] for n in names}, os.path.join(sharded, file))
    with open(os.path.join(sharded, "pytorch_model.bin.index.json"), "w") as f:
        json.dump({"metadata": split.metadata, "weight_map": split.tensor_to_filename}, f)
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=TARGETS.get(family, LLAMA_TARGETS),
                      init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(copy.deepcopy(model), lora).save_pretrained(os.path.join(out, "adapter_bin"),
                                                               safe_serialization=False)
    assert os.path.isfile(os.path.join(out, "adapter_bin", "adapter_model.bin"))

    def logits(folder):
        with torch.no_grad():
            return AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()(ids).logits
    with torch.no_grad():
        adapted = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32),
                                            os.path.join(out, "adapter_bin")).eval()(ids).logits
    save_file({"input_ids": ids.contiguous(), "bin_logits": logits(os.path.join(out, "bin")).contiguous(),
               "sharded_logits": logits(sharded).contiguous(), "adapter_logits": adapted.contiguous()},
              os.path.join(out, "reference.safetensors"))


class Hostile:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def refused_files(root):
    import zipfile
    out = os.path.join(root, "refused")
    os.makedirs(out, exist_ok=True)
    state = {"w": torch.randn(8, 8), "b": torch.randn(8)}
    torch.save(state, os.path.join(out, "legacy.bin"), _use_new_zipfile_serialization=False)
    torch.save({"w": torch.randn(2), "x": Hostile()}, os.path.join(out, "hostile.bin"))
    torch.save({"model": state, "step": 3}, os.path.join(out, "checkpoint.bin"))
    plain = os.path.join(out, "plain.bin")
    torch.save(state, plain)
    with zipfile.ZipFile(plain) as src, zipfile.ZipFile(os.path.join(out, "deflated.bin"), "w",
                                                        compression=zipfile.ZIP_DEFLATED) as dst:
        for item in src.infolist():
            dst.writestr(item.filename, src.read(item.filename))
    with open(plain, "rb") as f:
        data = f.read()
    with open(os.path.join(out, "truncated.bin"), "wb") as f:
        f.write(data[:len(data) // 2])


def off_by(a, b):
    return ((a - b).abs().max() / b.abs().max()).item()


def check(root, family):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    d = os.path.join(root, family)
    ref = load_file(os.path.join(d, "tailor.safetensors"))
    ids = ref["input_ids"]
    results = []
    # A run that trained one kind leaves only its folder (export: a full
    # fine-tune's model, tailor_adapter: LoRA's adapter).
    if os.path.isdir(os.path.join(d, "export")):
        exported = AutoModelForCausalLM.from_pretrained(os.path.join(d, "export"), dtype=torch.float32).eval()
        with torch.no_grad():
            results.append(("export", off_by(exported(ids).logits, ref["export_logits"])))
    if os.path.isdir(os.path.join(d, "tailor_adapter")):
        base = AutoModelForCausalLM.from_pretrained(os.path.join(d, "base"), dtype=torch.float32)
        adapted = PeftModel.from_pretrained(base, os.path.join(d, "tailor_adapter")).eval()
        with torch.no_grad():
            results.append(("adapter", off_by(adapted(ids).logits, ref["adapter_logits"])))
    if not results:
        sys.exit(f"{d}: neither export/ nor tailor_adapter/ to check")
    return [(family, what, err) for what, err in results]


QWEN2_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                 r"|\s*[\r\n]+|\s+(?!\S)|\s+")
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
                  r"|\s*[\r\n]+|\s+(?!\S)|\s+")

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2026; we'll see what they've done.",
    "Grüße aus München! Ça va très bien, merci. ¿Dónde está la biblioteca?",
    "東京は日本の首都です。我们今天去公园散步吧。",
    "Привет, как дела? Всё хорошо.",
    "مرحبا بالعالم، كيف حالك اليوم؟",
    "नमस्ते दुनिया, आप कैसे हैं?",
    "Emoji: 😀🎉👩‍💻🏳️‍🌈 and flags 🇯🇵🇫🇷!",
    "Numbers 1234567890 and 3.14159, prices $19.99, 12,345 units.",
    "    indented    with   runs of spaces\tand\ttabs\n\nand blank lines\r\n",
    "def f(x):\n    return x**2 + 1  # comment\n",
    "<|endoftext|> is special, and so is <|begin_of_text|> here.",
    "A mixed line: naïve café résumé, Ελληνικά κείμενο, 한국어 텍스트.",
    "Decomposed: cafe\u0301 nai\u0308ve \u1100\u1161 (NFC composes them), and Å vs A\u030a.",
]


def train_tokenizers(root):
    from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers
    lines = CORPUS + [f"{a} {b}, {c}!" for a in CORPUS[:6] for b in ("again", "und so weiter", "さらに") for c in range(3)]
    with open(os.path.join(root, "lines.json"), "w") as f:
        json.dump(lines, f, ensure_ascii=False)
    specials = {"gpt2": ["<|endoftext|>"], "llama3": ["<|begin_of_text|>", "<|end_of_text|>"],
                "qwen2": ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]}
    for name in ("gpt2", "llama3", "qwen2"):
        tok = Tokenizer(models.BPE(ignore_merges=name == "llama3"))
        if name == "gpt2":
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        else:
            pattern = LLAMA3_PATTERN if name == "llama3" else QWEN2_PATTERN
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        if name == "qwen2":
            tok.normalizer = normalizers.NFC()
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=specials[name], show_progress=False,
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(lines * 3, trainer)
        d = os.path.join(root, name)
        os.makedirs(d, exist_ok=True)
        tok.save(os.path.join(d, "tokenizer.json"))
        if name == "llama3":
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"}, f)
        if name == "qwen2":  # as Qwen2.5's: no BOS, <|endoftext|> ends documents
            with open(os.path.join(d, "tokenizer_config.json"), "w") as f:
                json.dump({"bos_token": None, "eos_token": "<|endoftext|>"}, f)
        tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
        ids = [tok.encode(line, add_special_tokens=False).ids for line in lines]
        with open(os.path.join(d, "ids.json"), "w") as f:
            json.dump(ids, f)


def nf4(root):
    import bitsandbytes.functional as F
    out = {}
    g = torch.Generator().manual_seed(3)
    # 300 blocks of 64: the last block of 256 absmax values is partial; a
    # few blocks of outliers and one of zeros.
    w = torch.randn(96, 200, generator=g) * 0.02
    w[5, :64] *= 40
    w[40, 64:128] = 0
    for name, dtype in (("fp32_", torch.float32), ("bf16_", torch.bfloat16)):
        x = w.to(dtype)
        q, st = F.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=True)
        out.update({name + "weight": x.float().contiguous(), name + "packed": q.flatten().contiguous(),
                    name + "absmax_codes": st.absmax.contiguous(), name + "offset": st.offset.float().reshape(1),
                    name + "absmax_scale": st.state2.absmax.float().contiguous(),
                    name + "dequantized": F.dequantize_4bit(q, st).float().contiguous()})
        # compress_statistics=False: fp32 absmax values (strategy.quantization: nf4).
        q, st = F.quantize_4bit(x, blocksize=64, quant_type="nf4", compress_statistics=False)
        out.update({name + "plain_packed": q.flatten().contiguous(), name + "plain_absmax": st.absmax.float().contiguous(),
                    name + "plain_dequantized": F.dequantize_4bit(q, st).float().contiguous()})
    out["code"] = F.create_dynamic_map(signed=True).contiguous()
    save_file(out, os.path.join(root, "nf4.safetensors"))


def encode(root):
    """The folder's tokenizer as transformers loads it: the ids of each line
    of root/lines.json (no specials added), their decoding, and its BOS, EOS
    and padding ids, into root/encoded.json."""
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(root)
    with open(os.path.join(root, "lines.json")) as f:
        lines = json.load(f)
    ids = [tok(line, add_special_tokens=False)["input_ids"] for line in lines]
    out = {"ids": ids, "decoded": [tok.decode(i) for i in ids],
           "bos": tok.bos_token_id, "eos": tok.eos_token_id, "pad": tok.pad_token_id}
    with open(os.path.join(root, "encoded.json"), "w") as f:
        json.dump(out, f)


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "encode":
        encode(sys.argv[2])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "tokenizers":
        train_tokenizers(sys.argv[2])
        return
    if len(sys.argv) == 3 and sys.argv[1] == "nf4":
        nf4(sys.argv[2])
        return
    if len(sys.argv) < 4 or sys.argv[1] not in ("make", "whole", "check", "torch_save"):
        sys.exit(__doc__)
    root, families = sys.argv[2], sys.argv[3:]
    for f in families:
        if f not in CONFIGS:
            sys.exit(f"hf_reference.py: unknown family {f}")
    if sys.argv[1] == "torch_save":
        for f in families:
            torch_saved(root, f)
        refused_files(root)
        return
    if sys.argv[1] in ("make", "whole"):
        for f in families:
            (make if sys.argv[1] == "make" else make_whole)(root, f)
        return
    bad = False
    for f in families:
        for family, what, err in check(root, f):
            ok = err <= TOLERANCE
            bad |= not ok
            print(json.dumps({"family": family, "check": what, "relative_error": err, "ok": ok}))
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
