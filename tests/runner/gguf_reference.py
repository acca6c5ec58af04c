#!/usr/bin/env python3
"""The other side of tests/runner/torch/gguf_export_test.cpp, run with the
project's .venv: Tailor's GGUF exports read by the `gguf` package and run
by llama.cpp itself (llama-cpp-python), against transformers and PEFT.

  gguf_reference.py make ROOT FAMILY...
      for each family, ROOT/FAMILY/ gets base/ (a tiny random model with a
      trained tokenizer of the kind its family ships, and a chat template in
      its tokenizer_config.json) and adapter/ (a PEFT LoRA adapter with
      non-zero B), and conversation.json.
  gguf_reference.py check ROOT FAMILY...
      the GGUF files Tailor wrote for ROOT/FAMILY (adapter merged), as
      tailor-OUTTYPE.gguf for f16, bf16, f32 and q8_0, against
      PEFT's merge_and_unload() of the adapter in fp32:
        - the gguf reader: architecture, every tensor's name (gguf-py's own
          name table for the family), shape and type; f32/f16/bf16 tensors
          byte-equal to the merged weights laid out as llama.cpp's converter
          lays them out (q/k rows interleaved for "llama", Gemma's norms as
          1 + w) and rounded to the type; q8_0 tensors byte-equal to gguf-py's
          quantizer of the same, and within half a step of their block scale;
        - llama.cpp: loads the file; its logits of a 40-token sequence within
          the type's tolerance of transformers' (relative to the largest);
          its tokenizer gives the ids of the family's tokenizer for a few
          lines; its chat formatting (llama-cpp-python's Jinja2ChatFormatter
          over the file's tokenizer.chat_template, and llama.cpp's own
          llama_chat_apply_template where it knows the template) equals
          ROOT/FAMILY/tailor-chat.txt (Tailor's rendering, written by the
          test), except llama.cpp's built-in Llama 2 format, which differs
          from Llama 2's own template in its spaces and BOS (reported).
      Prints one JSON line of what it measured; exits 1 on a failure.
  gguf_reference.py quantized GGUF FAMILY_DIR FILE_TYPE
      a file llama-quantize made from Tailor's export of FAMILY_DIR (a
      family without layout changes, base and adapter merged): its
      general.file_type is FILE_TYPE (llama.h's llama_ftype, 15 for
      Q4_K_M), and llama.cpp's logits are transformers' with the file's
      weights dequantized by gguf-py, within q8_0's tolerance (llama.cpp
      rounds activations to 8 bits for these dot products).
  gguf_reference.py folder GGUF MODEL_DIR OUTTYPE
      a GGUF file Tailor exported from MODEL_DIR (a job's model/, as
      transformers and AutoTokenizer load it): llama.cpp's logits and
      tokenizer against transformers' and the folder's, as above.
"""
import json
import os
import sys

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] + "
          "'<|end_header_id|>\\n\\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}")
GEMMA = ("{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
         "else message['role'] %}{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
         "'<end_of_turn>\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\\n' }}{% endif %}")
LLAMA2 = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}{{ '[INST] ' + "
          "message['content'] + ' [/INST]' }}{% else %}{{ ' ' + message['content'] + ' ' + eos_token }}{% endif %}"
          "{% endfor %}")

# Each family's tokenizer, as its models ship it: SentencePiece (BPE with
# byte fallback) or byte-level BPE with its pre-tokenizer, and a template.
TOKENIZERS = {
    "llama": ("spm", LLAMA2, []),
    "mixtral": ("spm", LLAMA2, []),
    "gemma2": ("spm-gemma", GEMMA, ["<start_of_turn>", "<end_of_turn>"]),
    "gemma3": ("spm-gemma", GEMMA, ["<start_of_turn>", "<end_of_turn>"]),
    "mistral": ("llama3", LLAMA3, ["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>",
                                   "<|end_header_id|>", "<|eot_id|>"]),
    "qwen2": ("qwen2", CHATML, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
    "qwen3": ("qwen2", CHATML, ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]),
    "gpt2": ("gpt2", None, ["<|endoftext|>"]),
    "phi3": ("spm", LLAMA2, []),
    "gpt_neox": ("gpt2", None, ["<|endoftext|>"]),  # Pythia's tokenizer: GPT-2's byte-level expression
}
CONVERSATION = [
    {"role": "user", "content": "What is the capital of France?"},
    {"role": "assistant", "content": "Paris, on the Seine."},
    {"role": "user", "content": "And of Italy?"},
]
LINES = hf.CORPUS[:6] + ["  two  spaces and a tab\there", "numbers 12345 and 3.14159", "ÆØÅ über straße"]
SEQUENCE = 40
# llama.cpp's logits against transformers' on the same (rounded) weights,
# largest difference over largest logit. llama.cpp rounds activations to the
# weights' dot-product type (f16, bf16, q8_0 blocks) and takes GELU from an
# f16 table (Gemma, GPT-2): measured up to 2.5e-3 (f32), 5.4e-3 (f16),
# 5.4e-2 (bf16) and 0.15 (q8_0) on these 4x-scaled random models; twice that
# here. A tensor laid out wrongly is off by about 1; the bytes are checked
# against the converter's on their own.
TOLERANCE = {"f32": 5e-3, "f16": 1.5e-2, "bf16": 1e-1, "q8_0": 3e-1}


def family_config(family):
    key = "gemma3_text" if family == "gemma3" else family
    cfg = dict(hf.CONFIGS[key])
    if family in ("gemma2", "gemma3"):
        # llama.cpp scales Gemma's queries by head_dim^-1/2 and rotates
        # Gemma 3's windowed layers by 10000; the test's models say so too.
        cfg["query_pre_attn_scalar"] = cfg["head_dim"]
    if family in ("mistral", "phi3"):
        # llama.cpp runs Mistral as "llama", which has no sliding window, and
        # Phi-3's is disabled there: the export warns about a window
        # (gguf_export_test checks that).
        cfg["sliding_window"] = None
    if family == "gemma3":
        cfg["rope_parameters"] = {"full_attention": dict(rope_type="linear", factor=8.0, rope_theta=1e6),
                                  "sliding_attention": dict(rope_type="default", rope_theta=10000.0)}
    if TOKENIZERS[family][0].startswith("spm"):
        cfg["vocab_size"] = 512  # 256 byte pieces, the characters and some merges
    if family == "gpt2":
        cfg.update(bos_token_id=None, eos_token_id=None)
    else:
        cfg.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    return cfg


def train_spm(out, gemma, specials):
    import sentencepiece as spm
    lines = hf.CORPUS * 4
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=os.path.join(out, "tokenizer"), model_type="bpe",
        vocab_size=512, byte_fallback=True, character_coverage=0.99, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=not gemma, user_defined_symbols=specials,
        unk_id=0, bos_id=1, eos_id=2, pad_id=-1 if not gemma else 3, minloglevel=2)
    os.remove(os.path.join(out, "tokenizer.vocab"))
    return {"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True, "add_eos_token": False}


def train_bpe(out, kind, specials):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE(ignore_merges=kind == "llama3"))
    if kind == "gpt2":
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    else:
        pattern = hf.LLAMA3_PATTERN if kind == "llama3" else hf.QWEN2_PATTERN
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(hf.CORPUS * 3, trainer)
    tok.save(os.path.join(out, "tokenizer.json"))
    return {"llama3": {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>"},
            "qwen2": {"bos_token": None, "eos_token": "<|im_end|>"},
            "gpt2": {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}}[kind]


def make(root, family):
    from peft import LoraConfig, get_peft_model
    out = os.path.join(root, family)
    base_dir = os.path.join(out, "base")
    os.makedirs(base_dir, exist_ok=True)
    model = hf.base_model(cfg=family_config(family), weight_scale=4.0)
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    model.save_pretrained(base_dir, safe_serialization=True)
    kind, template, specials = TOKENIZERS[family]
    if kind.startswith("spm"):
        config = train_spm(base_dir, kind == "spm-gemma", specials)
    else:
        config = train_bpe(base_dir, kind, specials)
    if template:
        config["chat_template"] = template
    with open(os.path.join(base_dir, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    target = "gemma3_text" if family == "gemma3" else family
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=hf.TARGETS.get(target, hf.LLAMA_TARGETS),
                      init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora).eval()
    with torch.no_grad():
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.5)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    with open(os.path.join(out, "adapter", "adapter_config.json")) as f:
        adapter_config = json.load(f)
    adapter_config["base_model_name_or_path"] = base_dir
    with open(os.path.join(out, "adapter", "adapter_config.json"), "w") as f:
        json.dump(adapter_config, f)
    with open(os.path.join(out, "conversation.json"), "w") as f:
        json.dump(CONVERSATION, f)


def merged_model(family_dir):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(os.path.join(family_dir, "base"), dtype=torch.float32,
                                                attn_implementation="eager")
    return PeftModel.from_pretrained(base, os.path.join(family_dir, "adapter")).merge_and_unload().eval()


def permute(w, heads):
    """llama.cpp's converter's LlamaModel.permute, as its source writes it."""
    return w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def llama3_factors(cfg, rope):
    """rope_freqs.weight, as the converter's LlamaModel.generate_extra_tensors computes it."""
    import math
    base = rope.get("rope_theta", getattr(cfg, "rope_theta", 10000.0))
    dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    freqs = 1.0 / (base ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim))
    factor, low, high = rope.get("factor", 8.0), rope.get("low_freq_factor", 1.0), rope.get("high_freq_factor", 4.0)
    old = rope.get("original_max_position_embeddings", 8192)
    low_wavelen, high_wavelen = old / low, old / high
    factors = []
    for freq in freqs:
        wavelen = 2 * math.pi / freq
        if wavelen < high_wavelen:
            factors.append(1)
        elif wavelen > low_wavelen:
            factors.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            factors.append(1 / ((1 - smooth) / factor + smooth))
    return torch.tensor(factors, dtype=torch.float32)


def expected_tensors(model, family, arch):
    """The merged weights as llama.cpp's converter lays them out, by GGUF
    name (gguf-py's tensor name map for the architecture)."""
    import gguf
    cfg = model.config
    layers = cfg.num_hidden_layers if hasattr(cfg, "num_hidden_layers") else cfg.n_layer
    arch_enum = {v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch]
    names = gguf.get_tensor_name_map(arch_enum, layers)
    state = {k: v.detach().float() for k, v in model.state_dict().items()}
    out = {}
    for name, t in state.items():
        if name.endswith((".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq")):
            continue
        if name == "lm_head.weight" and cfg.tie_word_embeddings:
            continue
        if family == "mixtral" and ".experts." in name:
            # transformers holds each block's experts stacked: gate_up_proj
            # (experts, 2 * ffn, hidden) with gate first, down_proj.
            layer = int(name.split(".")[2])
            if name.endswith("gate_up_proj"):
                n = t.shape[1] // 2
                out[f"blk.{layer}.ffn_gate_exps.weight"] = t[:, :n]
                out[f"blk.{layer}.ffn_up_exps.weight"] = t[:, n:]
            else:
                out[f"blk.{layer}.ffn_down_exps.weight"] = t
            continue
        if family in ("gemma2", "gemma3") and name.endswith("norm.weight"):
            t = t + 1
        if family == "gpt2" and name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight")):
            t = t.t()
        if family == "gpt_neox" and ".query_key_value." in name:
            # The converter's GPTNeoXModel.modify_tensors: rows head by head
            # (head, q/k/v, dim) regrouped as all q, all k, all v.
            heads = cfg.num_attention_heads
            t = t.reshape(heads, 3, t.shape[0] // heads // 3, *t.shape[1:]).transpose(0, 1).reshape(t.shape)
        if arch == "llama" and name.endswith("q_proj.weight"):
            t = permute(t, cfg.num_attention_heads)
        if arch == "llama" and name.endswith("k_proj.weight"):
            t = permute(t, cfg.num_key_value_heads)
        if family == "gpt2" and not name.startswith("transformer."):
            name = "transformer." + name if not name.startswith("lm_head") else name
        new = names.get_name(name, try_suffixes=(".weight", ".bias"))
        if new is None:
            raise SystemExit(f"{family}: no GGUF name for {name}")
        out[new] = t
    rope = getattr(cfg, "rope_parameters", None) or getattr(cfg, "rope_scaling", None) or {}
    if arch == "llama" and rope.get("rope_type") == "llama3":
        out["rope_freqs.weight"] = llama3_factors(cfg, rope)
    if family == "gpt2":
        out["output.weight"] = out["token_embd.weight"]
    return out


def rounded_bytes(t, ggml_type):
    import gguf
    from gguf import GGMLQuantizationType as Q
    a = t.contiguous().numpy().astype(np.float32)
    if ggml_type == Q.F32:
        return a.tobytes()
    if ggml_type == Q.F16:
        return a.astype(np.float16).tobytes()
    if ggml_type == Q.BF16:
        return t.to(torch.bfloat16).view(torch.int16).numpy().tobytes()
    if ggml_type == Q.Q8_0:
        return gguf.quants.quantize(a, Q.Q8_0).tobytes()
    raise SystemExit(f"unexpected type {ggml_type}")


def check_file(family, outtype, path, model):
    import gguf
    from gguf import GGMLQuantizationType as Q
    reader = gguf.GGUFReader(path)
    field = reader.fields["general.architecture"]
    arch = bytes(field.parts[field.data[0]]).decode()
    want_arch = {"mistral": "llama", "mixtral": "llama", "gemma3": "gemma3", "gpt_neox": "gptneox"}.get(family, family)
    problems = []
    if arch != want_arch:
        problems.append(f"architecture {arch}, expected {want_arch}")
    expected = expected_tensors(model, family, arch)
    got = {t.name: t for t in reader.tensors}
    if set(got) != set(expected):
        problems.append(f"tensor names differ: missing {sorted(set(expected) - set(got))}, "
                        f"extra {sorted(set(got) - set(expected))}")
    want_type = {"f32": Q.F32, "f16": Q.F16, "bf16": Q.BF16, "q8_0": Q.Q8_0}[outtype]
    worst_q8 = 0.0
    for name, t in sorted(expected.items()):
        if name not in got:
            continue
        g = got[name]
        shape = tuple(int(d) for d in reversed(g.shape.tolist()))
        if shape != tuple(t.shape):
            problems.append(f"{name}: shape {shape}, expected {tuple(t.shape)}")
            continue
        vector = t.dim() < 2 or not name.endswith(".weight") or "ffn_gate_inp" in name or name == "position_embd.weight"
        typ = Q.F32 if vector else want_type
        if typ == Q.Q8_0 and t.shape[-1] % 32:
            typ = Q.F16
        if g.tensor_type != typ:
            problems.append(f"{name}: type {g.tensor_type.name}, expected {typ.name}")
            continue
        if bytes(g.data.tobytes()) != rounded_bytes(t, typ):
            problems.append(f"{name}: {typ.name} bytes differ from the merged weights rounded as the converter does")
        if typ == Q.Q8_0:
            deq = gguf.quants.dequantize(g.data, Q.Q8_0).reshape(t.shape)
            blocks = t.reshape(-1, 32).abs().amax(dim=1, keepdim=True) / 127
            err = ((torch.from_numpy(np.array(deq)).reshape(-1, 32) - t.reshape(-1, 32)).abs() / blocks.clamp_min(1e-30))
            worst_q8 = max(worst_q8, err.max().item())
    if worst_q8 > 1.0:  # half a step, and the scale's own rounding to f16
        problems.append(f"q8_0 values are {worst_q8:.3f} block steps from the weights (at most 1 expected)")
    return arch, len(got), worst_q8, problems


def rounded_model(model, family, outtype):
    """`model` with its matrices rounded as the file stores them (vectors,
    the router and learned positions stay f32), in transformers: the same
    weights for llama.cpp and transformers."""
    import copy

    import gguf
    from gguf import GGMLQuantizationType as Q
    rounded = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in rounded.named_parameters():
            if p.dim() < 2 or name.endswith(("mlp.gate.weight", "wpe.weight")) or outtype == "f32":
                continue
            conv1d = family == "gpt2" and name.endswith((".c_attn.weight", ".c_proj.weight", ".c_fc.weight"))
            w = p.t() if conv1d else p  # the file's rows
            if outtype == "bf16":
                r = w.to(torch.bfloat16).float()
            elif outtype == "f16" or w.shape[-1] % 32:
                r = w.half().float()
            else:
                a = w.contiguous().numpy().astype(np.float32)
                r = torch.from_numpy(np.array(gguf.quants.dequantize(gguf.quants.quantize(a, Q.Q8_0), Q.Q8_0)))
                r = r.reshape(w.shape)
            p.copy_(r.t() if conv1d else r)
    return rounded


def check_llama_cpp(family, outtype, path, model, tokenizer_ids, chat_text):
    import llama_cpp
    problems = []
    # An f32 KV cache, so that what differs is the two engines' arithmetic
    # (llama.cpp rounds activations to the weights' type for its dot products).
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, n_threads=2, verbose=False,
                          seed=0, type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    vocab = model.config.vocab_size
    ids = torch.randint(3, vocab, (SEQUENCE,), generator=torch.Generator().manual_seed(7)).tolist()
    llm.reset()
    llm.eval(ids)
    ours = np.array(llm.scores[:SEQUENCE], dtype=np.float32)
    with torch.no_grad():
        ref = rounded_model(model, family, outtype)(torch.tensor([ids])).logits[0].float().numpy()
        full = model(torch.tensor([ids])).logits[0].float().numpy()
    rel = float(np.abs(ours - ref).max() / np.abs(ref).max())
    rel_full = float(np.abs(ours - full).max() / np.abs(full).max())
    if rel > TOLERANCE[outtype]:
        problems.append(f"llama.cpp's logits differ from transformers' on the same weights by {rel:.2e} of the "
                        f"largest (tolerance {TOLERANCE[outtype]:.0e})")
    agree = float((ours.argmax(-1) == ref.argmax(-1)).mean())
    mismatched = 0
    for line, want in tokenizer_ids:
        got = llm.tokenize(line.encode(), add_bos=False, special=True)
        if got != want:
            mismatched += 1
            problems.append(f"llama.cpp tokenizes {line!r} as {got[:12]}..., the tokenizer as {want[:12]}...")
    chat = {}
    template = llm.metadata.get("tokenizer.chat_template")
    if chat_text is not None:
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter
        bos = llm._model.token_get_text(llm.token_bos()) if llm.token_bos() >= 0 else ""
        eos = llm._model.token_get_text(llm.token_eos()) if llm.token_eos() >= 0 else ""
        formatted = Jinja2ChatFormatter(template=template, eos_token=eos, bos_token=bos,
                                        add_generation_prompt=True)(messages=CONVERSATION).prompt
        chat["jinja2_formatter_equal"] = formatted == chat_text
        if formatted != chat_text:
            problems.append(f"llama-cpp-python formats the conversation as {formatted!r}, Tailor as {chat_text!r}")
        native = native_chat(llama_cpp, template)
        chat["llama_chat_apply_template"] = None if native is None else native == chat_text.removeprefix(bos)
        # llama.cpp's built-in "llama2" drops the spaces around an answer
        # that Llama 2's template writes: its own difference, reported only.
        if native is not None and native != chat_text.removeprefix(bos) and "[INST]" not in template:
            problems.append(f"llama_chat_apply_template formats the conversation as {native!r}, Tailor as "
                            f"{chat_text!r}")
    elif template is not None:
        problems.append("the file has a chat template, the model had none")
    if outtype == "f16":
        measured, more = check_modelfile(llm, path, chat_text)
        chat.update(measured)
        problems += more
    return {"llama_cpp_rel_diff": rel, "rel_diff_to_fp32_model": rel_full, "argmax_agree": agree, "tokenizer_lines": len(tokenizer_ids),
            "tokenizer_mismatches": mismatched, **chat}, problems


_WORK = []


def _go_work():
    """One folder for the Go renderer, built once, removed at exit."""
    if not _WORK:
        import atexit
        import shutil
        import tempfile
        _WORK.append(tempfile.mkdtemp(prefix="tailor-modelfile-"))
        atexit.register(shutil.rmtree, _WORK[0], True)
    return _WORK[0]


def check_modelfile(llm, path, chat_text):
    """The Ollama Modelfile beside the file, read by the rules of Ollama's
    parser and its TEMPLATE rendered by Go's text/template as Ollama renders
    it (data/ollama_render.go): FROM names the file, and the conversation's
    prompt, tokenized by llama.cpp as Ollama's llama.cpp server tokenizes it
    (BOS where the file says, special tokens parsed), is the token sequence
    of Tailor's rendering. Without a chat template, the prompt is written as
    given."""
    import subprocess
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "data"))
    import ollama_reference
    problems = []
    modelfile = os.path.splitext(path)[0] + ".Modelfile"
    if not os.path.exists(modelfile):
        return {"modelfile": False}, [f"no Modelfile beside {path}"]
    work = _go_work()
    tool = str(ollama_reference.build_renderer(work))
    env = ollama_reference.go_env(work)
    parsed = json.loads(subprocess.run([tool, "modelfile", modelfile], capture_output=True, text=True, check=True,
                                       env=env).stdout)
    if "error" in parsed:
        return {"modelfile": True}, [f"Ollama's parser rules refuse {modelfile}: {parsed['error']}"]
    commands = parsed["commands"]
    args = lambda name: [c["args"] for c in commands if c["name"] == name]  # noqa: E731
    if args("model") != ["./" + os.path.basename(path)]:
        problems.append(f"the Modelfile's FROM is {args('model')}, not ./{os.path.basename(path)}")
    templates = args("template")
    measured = {"modelfile": True, "modelfile_template": bool(templates), "modelfile_stops": args("stop")}
    if len(templates) != 1:
        return measured, problems + [f"the Modelfile has {len(templates)} TEMPLATE lines"]
    messages = CONVERSATION if chat_text is not None else [{"role": "user", "content": "What is the capital?"}]
    rendered = json.loads(subprocess.run([tool, "render"], input=json.dumps([{"template": templates[0], "messages": messages}]),
                                         capture_output=True, text=True, check=True, env=env).stdout)["results"][0]
    if rendered.get("error"):
        return measured, problems + [f"Go cannot render the TEMPLATE: {rendered['error']}"]
    want_text = chat_text if chat_text is not None else messages[0]["content"]
    # Tailor's rendering writes its own BOS; a prompt as written gets the
    # one llama.cpp adds.
    got = llm.tokenize(rendered["text"].encode(), add_bos=True, special=True)
    want = llm.tokenize(want_text.encode(), add_bos=chat_text is None, special=True)
    measured["modelfile_prompt_tokens_equal"] = got == want
    if got != want:
        problems.append(f"Ollama's prompt from the Modelfile tokenizes as {got}, Tailor's rendering as {want} "
                        f"(rendered {rendered['text']!r})")
    if chat_text is not None and not measured["modelfile_stops"]:
        problems.append("the Modelfile has no stop words for a chat model")
    return measured, problems


def native_chat(llama_cpp, template):
    """llama.cpp's own rendering (its built-in templates, recognised by their
    markers), without the BOS it leaves to the tokenizer; None when it does
    not know the template."""
    import ctypes
    msgs = (llama_cpp.llama_chat_message * len(CONVERSATION))(
        *[llama_cpp.llama_chat_message(role=m["role"].encode(), content=m["content"].encode()) for m in CONVERSATION])
    buf = ctypes.create_string_buffer(4096)
    n = llama_cpp.llama_chat_apply_template(template.encode(), msgs, len(CONVERSATION), True, buf, len(buf))
    if n < 0:
        return None
    return buf.raw[:n].decode()


def tokenizer_lines(family_dir, family):
    kind = TOKENIZERS[family][0]
    base = os.path.join(family_dir, "base")
    if kind.startswith("spm"):
        import sentencepiece as spm
        sp = spm.SentencePieceProcessor(model_file=os.path.join(base, "tokenizer.model"))
        return [(line, sp.encode(line)) for line in LINES]
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(os.path.join(base, "tokenizer.json"))
    return [(line, tok.encode(line, add_special_tokens=False).ids) for line in LINES]


OUTTYPES = ("f16", "bf16", "f32", "q8_0")


def check(root, families):
    ok = True
    for family in families:
        family_dir = os.path.join(root, family)
        model = merged_model(family_dir)
        chat_text = None
        if os.path.exists(os.path.join(family_dir, "tailor-chat.txt")):
            with open(os.path.join(family_dir, "tailor-chat.txt")) as f:
                chat_text = f.read()
        lines = tokenizer_lines(family_dir, family)
        for outtype in OUTTYPES:
            path = os.path.join(family_dir, f"tailor-{outtype}.gguf")
            arch, tensors, worst_q8, problems = check_file(family, outtype, path, model)
            measured, more = check_llama_cpp(family, outtype, path, model, lines, chat_text)
            problems += more
            print(json.dumps({"family": family, "outtype": outtype, "architecture": arch, "tensors": tensors,
                              "q8_0_worst_block_steps": worst_q8, **measured, "problems": problems}), flush=True)
            ok = ok and not problems
    return ok


def check_quantized(path, family_dir, file_type):
    import gguf
    import llama_cpp
    reader = gguf.GGUFReader(path)
    field = reader.fields["general.file_type"]
    got = int(field.parts[field.data[0]][0])
    model = merged_model(family_dir)
    # The file's weights, dequantized, in the model: gguf-py's name map
    # from the checkpoint's names to the file's.
    arch = bytes(reader.fields["general.architecture"].parts[reader.fields["general.architecture"].data[0]]).decode()
    names = gguf.get_tensor_name_map({v: k for k, v in gguf.MODEL_ARCH_NAMES.items()}[arch],
                                     model.config.num_hidden_layers)
    stored = {t.name: t for t in reader.tensors}
    with torch.no_grad():
        for name, p in model.named_parameters():
            t = stored[names.get_name(name, try_suffixes=(".weight", ".bias"))]
            p.copy_(torch.from_numpy(np.array(gguf.quants.dequantize(t.data, t.tensor_type))).reshape(p.shape))
    llm = llama_cpp.Llama(model_path=path, n_ctx=64, n_batch=64, logits_all=True, n_threads=2, verbose=False,
                          type_k=llama_cpp.GGML_TYPE_F32, type_v=llama_cpp.GGML_TYPE_F32)
    ids = torch.randint(3, model.config.vocab_size, (SEQUENCE,), generator=torch.Generator().manual_seed(7)).tolist()
    llm.eval(ids)
    ours = np.array(llm.scores[:SEQUENCE], dtype=np.float32)
    with torch.no_grad():
        ref = model(torch.tensor([ids])).logits[0].float().numpy()
    rel = float(np.abs(ours - ref).max() / np.abs(ref).max())
    types = sorted({t.tensor_type.name for t in reader.tensors})
    problems = []
    if got != int(file_type):
        problems.append(f"general.file_type {got}, expected {file_type}")
    if not np.isfinite(ours).all() or rel > TOLERANCE["q8_0"]:
        problems.append(f"llama.cpp's logits differ from transformers' on the file's weights by {rel:.2e} of the "
                        f"largest (tolerance {TOLERANCE['q8_0']})")
    print(json.dumps({"gguf": path, "file_type": got, "tensor_types": types, "llama_cpp_rel_diff": rel,
                      "argmax_agree": float((ours.argmax(-1) == ref.argmax(-1)).mean()), "problems": problems}))
    return not problems


def check_folder(path, model_dir, outtype):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    tok = AutoTokenizer.from_pretrained(model_dir)
    lines = [(line, tok(line, add_special_tokens=False).input_ids) for line in LINES]
    measured, problems = check_llama_cpp(model.config.model_type, outtype, path, model, lines, None)
    print(json.dumps({"gguf": path, "outtype": outtype, **measured, "problems": problems}), flush=True)
    return not problems


def main():
    if len(sys.argv) >= 3 and sys.argv[1] == "make":
        for family in sys.argv[3:]:
            make(sys.argv[2], family)
        return 0
    if len(sys.argv) == 5 and sys.argv[1] == "quantized":
        return 0 if check_quantized(*sys.argv[2:]) else 1
    if len(sys.argv) == 5 and sys.argv[1] == "folder":
        return 0 if check_folder(*sys.argv[2:]) else 1
    if len(sys.argv) >= 4 and sys.argv[1] == "check":
        return 0 if check(sys.argv[2], sys.argv[3:]) else 1
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main())
