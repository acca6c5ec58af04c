#!/usr/bin/env python3
"""The Hugging Face side of tests/runner/torch/export_test.cpp, run with the
project's .venv: `tailor-runner export` folders against PEFT's own merge.

  export_reference.py merged ROOT FAMILY...
      for each family, ROOT/FAMILY/ holds base/ and adapter/ (as
      generate_reference.py make writes them) and Tailor's exports
      export-fp32/ and export-bf16/ of the adapter merged. Each export is
      compared, as transformers loads it, with PEFT's merge_and_unload() of
      the same adapter in that dtype: tensor names and shapes, every value
      (fp32 within 1e-6 of the largest; bf16 equal to PEFT's merge rounded
      to bf16, or one bf16 step from it where the fp32 sums round the other
      way), config.json's torch_dtype, and the logits (within 1e-5 of the
      largest). Prints one JSON line a family.
  export_reference.py tokenizer SOURCE EXPORT
      the exported folder's tokenizer, as AutoTokenizer loads it, has the
      source's chat template, special tokens and ids for a conversation.
"""
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402,F401  (the families' configs are registered on import)


def merged_reference(family_dir):
    """PEFT's merge of the adapter, in fp32, saved as a folder: loaded in a
    dtype by transformers as the export is (a model cast with .to() keeps
    other buffers than one loaded in that dtype)."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM
    base = AutoModelForCausalLM.from_pretrained(os.path.join(family_dir, "base"), dtype=torch.float32,
                                                attn_implementation="eager")
    out = os.path.join(family_dir, "peft-merged")
    PeftModel.from_pretrained(base, os.path.join(family_dir, "adapter")).merge_and_unload().save_pretrained(out)
    return out


def compare_tensors(ours, reference, dtype):
    """`ours` against the fp32 `reference` rounded to `dtype`: (largest
    difference over largest value, share of values not equal, largest
    difference in bf16 steps)."""
    ref = reference.to(dtype)
    diff = (ours.float() - ref.float()).abs()
    scale = reference.abs().max().item() or 1.0
    unequal = (diff > 0).float().mean().item()
    steps = 0.0
    if dtype == torch.bfloat16:
        # One bf16 step at each value's magnitude: 2^(exponent - 7).
        step = torch.exp2(torch.floor(torch.log2(ref.float().abs().clamp_min(1e-30))) - 7)
        steps = (diff / step).max().item()
    return diff.max().item() / scale, unequal, steps


def merged(root, families):
    from transformers import AutoModelForCausalLM
    ok = True
    for family in families:
        d = os.path.join(root, family)
        reference_dir = merged_reference(d)
        report = {"family": family}
        for name, dtype in (("fp32", torch.float32), ("bf16", torch.bfloat16)):
            # PEFT's fp32 merge, rounded once to this dtype as transformers loads it.
            reference = AutoModelForCausalLM.from_pretrained(reference_dir, dtype=dtype,
                                                             attn_implementation="eager").eval()
            ids = torch.randint(3, reference.config.vocab_size, (1, 16), generator=torch.Generator().manual_seed(3))
            ref_state = reference.state_dict()
            with torch.no_grad():
                ref_logits = reference(input_ids=ids).logits.float()
            export = os.path.join(d, "export-" + name)
            with open(os.path.join(export, "config.json")) as f:
                config_dtype = json.load(f).get("torch_dtype")
            # As transformers loads the folder (its loader fuses Mixtral's
            # per-expert tensors as the merged model holds them).
            model = AutoModelForCausalLM.from_pretrained(export, attn_implementation="eager").eval()
            ours = model.state_dict()
            names_equal = set(ours) == set(ref_state)
            worst = unequal = steps = 0.0
            for k in set(ours) & set(ref_state):
                if ours[k].shape != ref_state[k].shape or ours[k].dtype != dtype:
                    names_equal = False
                    continue
                w, u, s = compare_tensors(ours[k], ref_state[k].float(), dtype)
                worst, unequal, steps = max(worst, w), max(unequal, u), max(steps, s)
            with torch.no_grad():
                logits = model(input_ids=ids).logits.float()
            logit_diff = ((logits - ref_logits).abs().max() / ref_logits.abs().max()).item()
            want_dtype = "float32" if name == "fp32" else "bfloat16"
            loaded = str(model.dtype).replace("torch.", "")
            good = names_equal and config_dtype == want_dtype and loaded == want_dtype and logit_diff <= 1e-5
            good = good and (worst <= 1e-6 if name == "fp32" else steps <= 1.0)
            report[name] = {"names_shapes_dtypes": names_equal, "max_rel_diff": worst, "share_unequal": unequal,
                            "max_bf16_steps": steps, "config_dtype": config_dtype, "loaded_dtype": loaded,
                            "logits_rel_diff": logit_diff, "ok": good}
            ok = ok and good
        print(json.dumps(report), flush=True)
    return ok


def tokenizer(source, export):
    from transformers import AutoTokenizer
    a, b = AutoTokenizer.from_pretrained(source), AutoTokenizer.from_pretrained(export)
    messages = [{"role": "user", "content": "Grüße! What is 2 + 2?"}, {"role": "assistant", "content": "4"}]
    same = (a.chat_template == b.chat_template and a.eos_token == b.eos_token and
            a.apply_chat_template(messages, tokenize=True) == b.apply_chat_template(messages, tokenize=True))
    print(json.dumps({"tokenizer_equal": same, "has_template": b.chat_template is not None}))
    return same and b.chat_template is not None


def main():
    if len(sys.argv) >= 4 and sys.argv[1] == "merged":
        sys.exit(0 if merged(sys.argv[2], sys.argv[3:]) else 1)
    if len(sys.argv) == 4 and sys.argv[1] == "tokenizer":
        sys.exit(0 if tokenizer(sys.argv[2], sys.argv[3]) else 1)
    sys.exit(__doc__)


if __name__ == "__main__":
    main()
