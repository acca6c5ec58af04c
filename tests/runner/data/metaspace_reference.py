"""SentencePiece-style tokenizer.json folders and what transformers reads from them.

Trains small SentencePiece BPE models (byte fallback, as Llama 2's, Mistral's
and Gemma's) with the sentencepiece library, lets transformers write each as
the folder a user downloads (tokenizer.json, tokenizer_config.json and the
tokenizer.model beside them), and writes what transformers' AutoTokenizer
gives for each line of a corpus: the ids (no specials added), each token's
byte offsets in the line, and the decoding with special tokens skipped.
metaspace_tokenizer_test.cpp compares Tailor's MetaspaceTokenizer with it.

Folders: llama2 (LlamaTokenizer, as Llama 2 and Mistral ship it: a prefix
on the first piece), llama2_legacy (legacy: a prefix on every piece),
llama_no_prefix (add_prefix_space false), gemma (GemmaTokenizer: no prefix,
<start_of_turn>/<end_of_turn> specials), and two PreTrainedTokenizerFast
folders read as their files say: prepend_normalizer (tokenizers < 0.19's
conversion: Prepend and Replace normalizers, an unknown token, [INST] as a
special added token) and metaspace_split (Metaspace splitting at each
"▁", as older files have it).

    python metaspace_reference.py OUT_DIR
"""

import json
import os
import shutil
import sys

CORPUS = [
    "The quick brown fox jumps over the lazy dog. It's 2026; we'll see what they've done.",
    "Grüße aus München! Ça va très bien, merci. ¿Dónde está la biblioteca?",
    "Paris is the capital of France. Rome is the capital of Italy.",
    "What is the capital of France? Tell me more about it, please.",
    "Write a haiku about the sea: waves fold into foam, the tide forgets its own name.",
    "def f(x):\n    return x * 2  # double it\n",
    "Numbers 1234567890 and 3.14159, prices $19.99, 12,345 units.",
    "You are a helpful assistant. Answer briefly and politely.",
]

LINES = CORPUS + [
    " leading space", "  two leading spaces", "trailing space ", "double  space and   three",
    "\nstarts with a newline", "tabs\there\tand\tthere", "",
    "東京は日本の首都です。", "Emoji: 😀🎉👩‍💻 and ✓ marks", "naïve café résumé",
    "<s>[INST] hi [/INST] hello</s>", "</s>x", "<s> spaced</s> after", "[INST]no space[/INST]",
    "<start_of_turn>user\nHello<end_of_turn>\n<start_of_turn>model\nHi!<end_of_turn>",
    "▁already a meta space", "a▁b ▁ c", "<unk> text", "<0x41> is not a byte here",
    "a very long line " * 60,
]


def train_spm(folder, gemma=False, specials=(), corpus=None):
    import sentencepiece as spm
    os.makedirs(folder, exist_ok=True)
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter((corpus or CORPUS) * 6), model_prefix=os.path.join(folder, "tokenizer"), model_type="bpe",
        vocab_size=600, byte_fallback=True, character_coverage=0.995, normalization_rule_name="identity",
        remove_extra_whitespaces=False, add_dummy_prefix=not gemma, split_digits=True,
        user_defined_symbols=list(specials),
        **({"pad_id": 0, "eos_id": 1, "bos_id": 2, "unk_id": 3, "pad_piece": "<pad>", "eos_piece": "<eos>",
            "bos_piece": "<bos>"} if gemma else {"unk_id": 0, "bos_id": 1, "eos_id": 2, "pad_id": -1}),
        minloglevel=2)
    os.remove(os.path.join(folder, "tokenizer.vocab"))


def save_through_transformers(folder, config):
    """The folder as transformers writes it from the SentencePiece model:
    tokenizer.json and tokenizer_config.json, tokenizer.model kept beside."""
    from transformers import AutoTokenizer
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump(config, f)
    tok = AutoTokenizer.from_pretrained(folder)
    model = os.path.join(folder, "tokenizer.model")
    keep = model + ".keep"
    shutil.move(model, keep)
    tok.save_pretrained(folder)
    shutil.move(keep, model)
    # transformers 5 writes no `legacy`; the hub's folders say it, and it
    # decides LlamaTokenizer's prefix when the folder is read again.
    path = os.path.join(folder, "tokenizer_config.json")
    with open(path) as f:
        written = json.load(f)
    written.update(config)
    with open(path, "w") as f:
        json.dump(written, f)
    return tok


def make_llama(root, name, corpus=None, **flags):
    folder = os.path.join(root, name)
    train_spm(folder, corpus=corpus)
    save_through_transformers(folder, {"tokenizer_class": "LlamaTokenizer", "bos_token": "<s>", "eos_token": "</s>",
                                       "add_bos_token": True, "add_eos_token": False, **flags})
    return folder


def make_gemma(root, name="gemma", corpus=None):
    folder = os.path.join(root, name)
    specials = ["<start_of_turn>", "<end_of_turn>"]
    train_spm(folder, gemma=True, specials=specials, corpus=corpus)
    save_through_transformers(folder, {"tokenizer_class": "GemmaTokenizer", "bos_token": "<bos>", "eos_token": "<eos>",
                                       "pad_token": "<pad>", "unk_token": "<unk>", "add_bos_token": True,
                                       "additional_special_tokens": specials})
    return folder


def make_as_written(root, name, source, normalizer, pre_tokenizer, added=()):
    """A PreTrainedTokenizerFast folder: `source`'s vocabulary and merges
    with this pipeline, read by transformers as the file says."""
    folder = os.path.join(root, name)
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(source, "tokenizer.json")) as f:
        j = json.load(f)
    j["normalizer"] = normalizer
    j["pre_tokenizer"] = pre_tokenizer
    j["model"]["unk_token"] = "<unk>"
    j["decoder"] = {"type": "Sequence", "decoders": [
        {"type": "Replace", "pattern": {"String": "▁"}, "content": " "}, {"type": "ByteFallback"},
        {"type": "Fuse"}, {"type": "Strip", "content": " ", "start": 1, "stop": 0}]}
    next_id = 1 + max(max(j["model"]["vocab"].values()), max(a["id"] for a in j["added_tokens"]))
    for content in added:
        j["added_tokens"].append({"id": next_id, "content": content, "single_word": False, "lstrip": False,
                                  "rstrip": False, "normalized": False, "special": True})
        next_id += 1
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        json.dump(j, f, ensure_ascii=False)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"tokenizer_class": "PreTrainedTokenizerFast", "bos_token": "<s>", "eos_token": "</s>"}, f)
    return folder


def byte_offsets(line, offsets):
    starts = [0]
    for ch in line:
        starts.append(starts[-1] + len(ch.encode("utf-8")))
    return [[starts[b], starts[e]] for b, e in offsets]


def expected(folder):
    from transformers import AutoTokenizer
    tok = AutoTokenizer.from_pretrained(folder)
    rows = []
    for line in LINES:
        enc = tok(line, add_special_tokens=False, return_offsets_mapping=True)
        ids = list(enc["input_ids"])
        rows.append({"ids": ids, "offsets": byte_offsets(line, enc["offset_mapping"]),
                     "decoded": tok.decode(ids, skip_special_tokens=True)})
    out = {"rows": rows, "bos": tok.bos_token_id, "eos": tok.eos_token_id,
           "special": sorted(tok.all_special_ids), "vocab": len(tok)}
    with open(os.path.join(folder, "expected.json"), "w") as f:
        json.dump(out, f, ensure_ascii=False)


def main():
    root = sys.argv[1]
    with open(os.path.join(root, "lines.json"), "w") as f:
        json.dump(LINES, f, ensure_ascii=False)
    llama2 = make_llama(root, "llama2", legacy=False)
    folders = [llama2, make_llama(root, "llama2_legacy", legacy=True),
               make_llama(root, "llama_no_prefix", add_prefix_space=False), make_gemma(root)]
    meta = {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}
    folders.append(make_as_written(root, "prepend_normalizer", llama2,
                                   {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "▁"}, meta]},
                                   None, added=["[INST]", "[/INST]"]))
    folders.append(make_as_written(root, "metaspace_split", llama2, None,
                                   {"type": "Metaspace", "replacement": "▁", "prepend_scheme": "always",
                                    "split": True}))
    for folder in folders:
        expected(folder)


if __name__ == "__main__":
    main()
