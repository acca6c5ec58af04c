"""Reference tokens and masks of rendered conversations, from transformers.

Trains small byte-level BPE tokenizers with the `tokenizers` library (the
special tokens of Llama 3, ChatML (Qwen2.5) and Phi-3) and SentencePiece BPE
models written by transformers as Llama 2's and Gemma's folders are
(metaspace_reference.py), saves each as a model folder, and for every (template, conversation) case writes what
transformers' apply_chat_template gives: the rendered text, the token ids
(tokenize=True) and, for templates with {% generation %} blocks, the
assistant mask (return_assistant_tokens_mask=True). For the SentencePiece
folders it also writes what TRL's SFTTrainer makes of prompt-completion
records (input_ids, labels) and DPOTrainer of preference pairs
(prompt_ids, chosen_ids, rejected_ids), each trainer built over a tiny
random Llama and not run. chat_tokens_test.cpp compares Tailor's
tokenize_chat, dataset and tokenize_pair against it.

    python chat_tokens_reference.py OUT_DIR
"""

import json
import os
import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))
from hf_reference import LLAMA3_PATTERN, QWEN2_PATTERN  # noqa: E402
import metaspace_reference  # noqa: E402

TEMPLATES = HERE / "chat_templates"

# family: (special tokens, bos, eos, pre-tokenizer pattern, [(name, template file)])
FAMILIES = {
    "llama3": (["<|begin_of_text|>", "<|end_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"],
               "<|begin_of_text|>", "<|eot_id|>", LLAMA3_PATTERN,
               ["trl_llama3.jinja", "trl_llama3_training.jinja", "llamacpp_meta-llama-Llama-3.2-3B-Instruct.jinja"]),
    "qwen2": (["<|endoftext|>", "<|im_start|>", "<|im_end|>"], None, "<|im_end|>", QWEN2_PATTERN,
              ["trl_qwen2_5.jinja", "trl_qwen2_5_training.jinja", "llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja"]),
    "phi3": (["<|endoftext|>", "<|system|>", "<|user|>", "<|assistant|>", "<|end|>"], None, "<|endoftext|>",
             LLAMA3_PATTERN, ["trl_phi3.jinja", "trl_phi3_training.jinja"]),
}

# SentencePiece-style folders: family: (builder, [template file]). Llama 2's
# template has no {% generation %} version; llama2_training.jinja is made
# from it here (training_llama2_template), written beside the reference.
SPM_FAMILIES = {
    "llama2": (metaspace_reference.make_llama,
               ["chujiezheng_llama-2-chat.jinja", "chujiezheng_mistral-instruct.jinja", "trl_mistral.jinja",
                "llama2_training.jinja"]),
    "gemma": (metaspace_reference.make_gemma,
              ["trl_gemma3.jinja", "trl_gemma3_training.jinja", "chujiezheng_gemma-it.jinja"]),
}


def training_llama2_template():
    """Llama 2's template with each assistant reply and its </s> in a
    {% generation %} block (the space before the reply stays outside), and
    the same text: a newline more, for the one trim_blocks takes after the
    block's end tag."""
    text = (TEMPLATES / "chujiezheng_llama-2-chat.jinja").read_text()
    old = "{{ ' ' + content | trim + ' ' + eos_token }}"
    assert old in text
    return text.replace(old, "{{ ' ' }}{% generation %}{{ content | trim + ' ' + eos_token }}{% endgeneration %}\n")


TEXTS = [
    "Hello!", "What is the capital of France?", "Paris is the capital of France.",
    "Write a haiku about the sea.", "Waves fold into foam,\nthe tide forgets its own name,\nsalt wind keeps the time.",
    "  leading and trailing spaces  ", "Ünïcödé: naïve café, 日本語のテキスト, emoji 😀👩‍💻.",
    "def f(x):\n    return x * 2\n", "Numbers: 3.14159, 42, 1,000,000.", "Short.", "Tell me more.",
    "Sure — here are three points:\n1. One\n2. Two\n3. Three", "¿Qué tal? Ça va.", "\nStarts with a newline",
]


def conversations(n=60, seed=7):
    rng = random.Random(seed)
    out = []
    for i in range(n):
        msgs = []
        if i % 3 == 0:
            msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "Answer briefly.",
                                                                  "Tu es un assistant utile."])})
        for _ in range(1 + i % 4):
            msgs.append({"role": "user", "content": rng.choice(TEXTS)})
            msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
        out.append(msgs)
    return out


# Prompt-completion records whose boundary each tokenizer may encode
# differently apart than together: a completion mid-line, after a newline,
# after a space, with its own leading space, merging with the prompt's end.
PROMPT_COMPLETIONS = [
    ("Question: 2+2=", "4"), ("Answer:\n", "Yes."), ("Answer: ", "yes, it is."), ("Say hi:", " hello there"),
    ("The cat sat on", "the mat"), ("What is the capital of France?", " Paris."), ("Ünïcödé: naïve", " café 😀"),
    ("def f(x):\n", "    return x * 2\n"), ("Numbers: 3.14", "159, 42"), ("Tell me more.", "\nStarts with a newline"),
    ("Capital of Fra", "nce is Paris"), ("She said hel", "lo"),
]
# Pairs over them, and two whose completions leave the prompt's ids at
# different places (a prompt ending mid-word, one completion finishing it).
PAIRS = [(p, c, PROMPT_COMPLETIONS[(i + 3) % len(PROMPT_COMPLETIONS)][1]) for i, (p, c) in enumerate(PROMPT_COMPLETIONS)]
PAIRS += [("Capital of Fra", "nce is Paris", " France is Paris"), ("She said hel", "lo", " hello")]


def trl_rows(folder, tok):
    """TRL's SFTTrainer token rows of PROMPT_COMPLETIONS, and its DPOTrainer's
    and KTOTrainer's of PAIRS (KTO unpairs them itself)."""
    import datasets
    import tempfile
    import transformers
    from trl import DPOConfig, DPOTrainer, KTOConfig, KTOTrainer, SFTConfig, SFTTrainer
    transformers.logging.set_verbosity_error()
    datasets.disable_progress_bars()
    datasets.disable_caching()
    config = transformers.LlamaConfig(vocab_size=len(tok), hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                      num_attention_heads=2, num_key_value_heads=1,
                                      bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id)
    model = transformers.LlamaForCausalLM(config)
    sft = datasets.Dataset.from_list([{"prompt": p, "completion": c} for p, c in PROMPT_COMPLETIONS])
    pairs = datasets.Dataset.from_list([{"prompt": p, "chosen": c, "rejected": r} for p, c, r in PAIRS])
    with tempfile.TemporaryDirectory() as scratch:
        model.save_pretrained(os.path.join(scratch, "model"))  # DPOTrainer loads its reference from the path
        model = os.path.join(scratch, "model")
        common = dict(output_dir=os.path.join(scratch, "out"), use_cpu=True, bf16=False, fp16=False, max_length=None,
                      report_to=[], save_strategy="no")
        s = SFTTrainer(model=model, args=SFTConfig(packing=False, **common), train_dataset=sft, processing_class=tok)
        d = DPOTrainer(model=model, ref_model=None, args=DPOConfig(**common), train_dataset=pairs, processing_class=tok)
        k = KTOTrainer(model=model, ref_model=None, args=KTOConfig(**common), train_dataset=pairs, processing_class=tok)
        # Unpaired as [every chosen row, then every rejected one]: each found
        # by its pair and label.
        kto = {}
        for r in k.train_dataset:
            completion = r["completion"].removesuffix(tok.eos_token)
            i = next(i for i, (p, c, rej) in enumerate(PAIRS) if (i, r["label"]) not in kto
                     and p == r["prompt"] and (c if r["label"] else rej) == completion)
            kto[(i, r["label"])] = {key: list(r[key]) for key in ("prompt_ids", "completion_ids")}
        return {"records": [{"prompt": p, "completion": c} for p, c in PROMPT_COMPLETIONS],
                "pairs": [dict(r) for r in pairs],
                # TRL 1.16 keeps the completion mask as labels: -100 where untrained.
                "sft": [{"input_ids": list(r["input_ids"]), "trained": [int(x != -100) for x in r["labels"]]}
                        for r in s.train_dataset],
                "dpo": [{k: list(r[k]) for k in ("prompt_ids", "chosen_ids", "rejected_ids")} for r in d.train_dataset],
                "kto": [{"chosen": kto[(i, True)], "rejected": kto[(i, False)]} for i in range(len(PAIRS))]}


def train(folder, specials, bos, eos, pattern, corpus):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(pattern), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=800, special_tokens=specials, show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tok.train_from_iterator(corpus * 3, trainer)
    os.makedirs(folder, exist_ok=True)
    tok.save(os.path.join(folder, "tokenizer.json"))
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": bos, "eos_token": eos}, f)


def main():
    from transformers import AutoTokenizer
    out_dir = sys.argv[1]
    convs = conversations()
    corpus = TEXTS + [m["content"] for c in convs for m in c]
    result = {"conversations": convs, "families": {}}
    generated = {"llama2_training.jinja": training_llama2_template()}
    for name, text in generated.items():
        with open(os.path.join(out_dir, name), "w") as f:
            f.write(text)
    families = {family: (lambda folder, f=f: train(folder, *f[:4], corpus), f[4]) for family, f in FAMILIES.items()}
    families.update({family: (lambda folder, b=b: b(os.path.dirname(folder), os.path.basename(folder), corpus=corpus),
                              templates) for family, (b, templates) in SPM_FAMILIES.items()})
    for family, (build, templates) in families.items():
        folder = os.path.join(out_dir, family)
        build(folder)
        tok = AutoTokenizer.from_pretrained(folder)
        cases = {}
        for name in templates:
            template = generated[name] if name in generated else (TEMPLATES / name).read_text()
            rows = []
            for conv in convs:
                text = tok.apply_chat_template(conv, chat_template=template, tokenize=False)
                row = {"text": text}
                enc = tok.apply_chat_template(conv, chat_template=template, tokenize=True, return_dict=True,
                                              return_assistant_tokens_mask="{% generation" in template)
                row["ids"] = list(enc["input_ids"])
                if "assistant_masks" in enc:
                    row["mask"] = list(enc["assistant_masks"])
                rows.append(row)
            cases[name] = rows
        result["families"][family] = {"folder": folder, "cases": cases}
        if family in SPM_FAMILIES:
            result["families"][family]["trl"] = trl_rows(folder, tok)
    with open(os.path.join(out_dir, "reference.json"), "w") as f:
        json.dump(result, f, ensure_ascii=False)


if __name__ == "__main__":
    main()
