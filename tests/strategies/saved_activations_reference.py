#!/usr/bin/env python3
"""What a training stack's own modules keep for backward, a layer at a time.

Runs the blocks of a small Llama (hidden 256, 8 heads, MLP 688, vocab 1024;
bf16 on the CPU) under torch's saved-tensor hooks and counts each storage a
saved tensor keeps alive once, parameters and buffers left out: the bytes a
layer keeps are those of 3 layers less those of 2, and those a token adds
the difference between 256 and 128 tokens. This is the figure the
memory model's activation terms (strategies/activation_terms.cpp) predict
for the stack's runtime profile: hf_saved_activations_test.cpp (in
runtime_profile_interop_test) holds the hf
profile to transformers and PEFT in .venv, memory_model_test.cpp the litgpt
one to figures this script measured on litgpt's sources.

Stacks:
  (default)        transformers' LlamaForCausalLM, with PEFT's LoRA
  --litgpt SRC     lit_gpt (2023) or litgpt from a source tree (SRC holds
                   lit_gpt/ or litgpt/); Lightning's imports are stubbed,
                   as only the model's modules run

Prints (or writes to --out) one JSON object: {"stack", "kv_heads", "dropout",
"lora", "bytes_per_token_per_hidden", "tensors_of_3_layers_at_256"}.
"""
import argparse
import importlib.abc
import importlib.machinery
import json
import sys
import types

HIDDEN, HEADS, MLP, VOCAB = 256, 8, 688, 1024


def stub_imports(packages):
    """Every import of these packages yields a module of inert classes."""

    class Inert:
        def __init__(self, *args, **kwargs):
            pass

        def __call__(self, *args, **kwargs):
            return Inert()

        def __getattr__(self, name):
            return Inert()

        def __bool__(self):
            return False

    class Module(types.ModuleType):
        def __getattr__(self, name):
            if name.startswith("__"):
                raise AttributeError(name)
            return type(name, (Inert,), {})

    class Finder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
        def find_spec(self, name, path, target=None):
            if name.split(".")[0] in packages:
                return importlib.machinery.ModuleSpec(name, self, is_package=True)
            return None

        def create_module(self, spec):
            return Module(spec.name)

        def exec_module(self, module):
            module.__path__ = []

    sys.meta_path.insert(0, Finder())


def saved_storages(run, params):
    import torch

    seen = {}

    def pack(t):
        storage = t.untyped_storage()
        if storage.data_ptr() not in params and storage.nbytes() > 0:
            seen[storage.data_ptr()] = (storage.nbytes(), str(t.dtype).removeprefix("torch."), list(t.shape))
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        run()
    return seen


def litgpt_blocks(src, layers, tokens, args):
    import torch

    sys.path.insert(0, src)
    stub_imports({"lightning", "lightning_utilities", "jsonargparse", "tokenizers", "huggingface_hub",
                  "safetensors", "yaml", "litdata", "torchmetrics", "bitsandbytes", "psutil", "requests", "tqdm"})
    # The package's __init__ imports its whole API; the model needs none of it.
    package = "litgpt" if __import__("os").path.isdir(f"{src}/litgpt") else "lit_gpt"
    sys.modules[package] = types.ModuleType(package)
    sys.modules[package].__path__ = [f"{src}/{package}"]
    importlib.import_module(f"{package}.model")  # before its config, as the package's __init__ does
    lora = importlib.import_module(f"{package}.lora")
    neox = args.arch == "neox"
    # neox: GPT-NeoX's block (StableLM-alpha): LayerNorm, a quarter of each
    # head rotated, exact GELU MLP 4h wide, parallel residual, biases.
    common = dict(block_size=512, vocab_size=VOCAB, padded_vocab_size=VOCAB, n_layer=layers, n_head=HEADS,
                  n_embd=HIDDEN, n_query_groups=args.kv_heads, rotary_percentage=0.25 if neox else 1.0,
                  parallel_residual=neox, bias=neox, intermediate_size=4 * HIDDEN if neox else MLP)
    norm, mlp = ("LayerNorm", "GptNeoxMLP") if neox else ("RMSNorm", "LLaMAMLP")
    if package == "litgpt":
        config = lora.Config(**common, norm_class_name=norm, mlp_class_name=mlp, lora_r=8, lora_alpha=16,
                             lora_dropout=args.dropout, lora_query=True, lora_value=True)
    else:
        config = lora.Config(**common, _norm_class=norm, _mlp_class=mlp, r=8, alpha=16,
                             dropout=args.dropout, to_query=True, to_value=True)
    # bf16-true: the rope cache is built while bf16 is the default dtype.
    torch.set_default_dtype(torch.bfloat16)
    model = lora.GPT(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16)
    lora.mark_only_lora_as_trainable(model)
    cos, sin = model.cos[:tokens], model.sin[:tokens]
    if package == "litgpt":
        cos, sin = cos.unsqueeze(0), sin.unsqueeze(0)

    def run():
        x = model.transformer.wte(torch.randint(0, VOCAB, (1, tokens)))
        for block in model.transformer.h:
            x = block(x, cos, sin) if package == "litgpt" else block(x, cos, sin, None, None)

    return model, run, package


def hf_blocks(layers, tokens, args):
    import peft
    import torch
    import transformers

    shape = dict(hidden_size=HIDDEN, intermediate_size=MLP, num_hidden_layers=layers, num_attention_heads=HEADS,
                 num_key_value_heads=args.kv_heads, vocab_size=VOCAB, max_position_embeddings=512,
                 attn_implementation="sdpa")
    if args.family == "qwen3":  # RMSNorm on each head of q and k
        model = transformers.Qwen3ForCausalLM(transformers.Qwen3Config(head_dim=HIDDEN // HEADS, **shape))
    else:
        model = transformers.LlamaForCausalLM(transformers.LlamaConfig(**shape))
    model = model.to(torch.bfloat16)
    stack = f"transformers {transformers.__version__}"
    body = model.model
    if args.lora != "none":
        targets = ["q_proj", "v_proj"] if args.lora == "qv" else "all-linear"
        model = peft.get_peft_model(model, peft.LoraConfig(r=8, lora_alpha=16, lora_dropout=args.dropout,
                                                           target_modules=targets))
        stack += f", peft {peft.__version__}"
    model.train()
    ids = torch.randint(0, VOCAB, (1, tokens))
    if not args.autocast:
        return model, lambda: body(input_ids=ids), stack

    def run():  # as the Trainer runs a bf16 model with bf16=True (accelerate's autocast)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            body(input_ids=ids)

    return model, run, stack + ", autocast"


def measure(layers, tokens, args):
    import torch

    torch.manual_seed(0)
    model, run, stack = litgpt_blocks(args.litgpt, layers, tokens, args) if args.litgpt else hf_blocks(layers, tokens, args)
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    params |= {b.untyped_storage().data_ptr() for b in model.buffers()}
    return saved_storages(run, params), stack


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--litgpt", metavar="SRC", help="a lit_gpt or litgpt source tree instead of transformers")
    parser.add_argument("--arch", choices=["llama", "neox"], default="llama",
                        help="the block: Llama's (default) or GPT-NeoX's (litgpt only)")
    parser.add_argument("--family", choices=["llama", "qwen3"], default="llama",
                        help="transformers' model: Llama (default) or Qwen3 (q_norm and k_norm)")
    parser.add_argument("--kv-heads", type=int, default=HEADS, help=f"K/V heads (default {HEADS}: no GQA)")
    parser.add_argument("--dropout", type=float, default=0.0, help="LoRA dropout (default 0)")
    parser.add_argument("--out", metavar="FILE", help="write the JSON object there instead of printing it")
    parser.add_argument("--autocast", action="store_true", help="run under bf16 autocast (transformers only)")
    parser.add_argument("--lora", choices=["qv", "all", "none"], default="qv",
                        help="LoRA r8 on q and v (default), on every linear, or none: a full fine-tune "
                             "(transformers only)")
    args = parser.parse_args()
    # A layer's bytes at two lengths: what grows with the tokens, less what
    # does not (weights autocast copies once a step).
    def layer_bytes(tokens):
        two, _ = measure(2, tokens, args)
        three, stack = measure(3, tokens, args)
        return sum(v[0] for v in three.values()) - sum(v[0] for v in two.values()), three, stack

    short, _, _ = layer_bytes(128)
    long, tensors, stack = layer_bytes(256)
    result = json.dumps({"stack": stack, "family": args.family, "kv_heads": args.kv_heads, "dropout": args.dropout, "lora": args.lora,
                         "bytes_per_token_per_hidden": (long - short) / (128 * HIDDEN),
                         "tensors_of_3_layers_at_256": sorted(tensors.values(), key=lambda v: -v[0])})
    if args.out:
        with open(args.out, "w") as f:
            f.write(result + "\n")
    else:
        print(result)


if __name__ == "__main__":
    main()
