#!/usr/bin/env python3
"""llama.cpp's side of bench/gguf_vs_converter.sh, on the same torch.

  gguf_converter.py tokenizer DIR   a SentencePiece BPE model of 1,000 pieces
                                    (identity normalizer, byte fallback, as
                                    Llama 2's) in DIR/tokenizer.model, with
                                    DIR/tokenizer_config.json
  gguf_converter.py fetch DIR       llama.cpp's convert_hf_to_gguf.py, with
                                    the modules it imports, from the
                                    llama-cpp-python sdist the lock pins (PyPI,
                                    through pip); prints the script's path
  gguf_converter.py same A B        whether two GGUF files hold the same
                                    tensors (names, types, bytes) and the same
                                    vocabulary: prints one JSON line
"""
import json
import os
import re
import subprocess
import sys
import tarfile


def tokenizer(out):
    import sentencepiece as spm
    words = ("the model trains on small machines and answers in its own words while the planner "
             "keeps every byte of memory in view across layers heads and tokens").split()
    lines = [" ".join(words[(i * 7 + j) % len(words)] for j in range(12)) + f" {i}." for i in range(400)]
    spm.SentencePieceTrainer.train(sentence_iterator=iter(lines), model_prefix=os.path.join(out, "tokenizer"),
                                   model_type="bpe", vocab_size=1000, byte_fallback=True, character_coverage=1.0,
                                   normalization_rule_name="identity", remove_extra_whitespaces=False,
                                   hard_vocab_limit=False, unk_id=0, bos_id=1, eos_id=2, minloglevel=2)
    os.remove(os.path.join(out, "tokenizer.vocab"))
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True}, f)


def fetch(out):
    lock = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts", "python", "requirements.txt")
    version = re.search(r"^llama_cpp_python==(\S+)", open(lock).read(), re.M).group(1)
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", ":all:",
                    f"llama-cpp-python=={version}", "-d", out], check=True)
    sdist = os.path.join(out, f"llama_cpp_python-{version}.tar.gz")
    prefix = f"llama_cpp_python-{version}/vendor/llama.cpp/"
    with tarfile.open(sdist) as tar:
        members = [m for m in tar.getmembers() if m.name.startswith(prefix) and
                   (m.name == prefix + "convert_hf_to_gguf.py" or m.name.startswith(prefix + "conversion/")
                    or m.name.startswith(prefix + "gguf-py/"))]
        tar.extractall(out, members=members, filter="data")
    print(os.path.join(out, prefix, "convert_hf_to_gguf.py"))


def same(a, b):
    import gguf
    ra, rb = gguf.GGUFReader(a), gguf.GGUFReader(b)
    ta, tb = {t.name: t for t in ra.tensors}, {t.name: t for t in rb.tensors}
    differ = sorted(n for n in set(ta) & set(tb)
                    if ta[n].tensor_type != tb[n].tensor_type or ta[n].data.tobytes() != tb[n].data.tobytes())

    def array(r, key):
        f = r.fields[key]
        return [bytes(f.parts[i]) if key.endswith("tokens") else f.parts[i].tolist() for i in f.data]

    vocab = all(array(ra, k) == array(rb, k) for k in ("tokenizer.ggml.tokens", "tokenizer.ggml.token_type",
                                                        "tokenizer.ggml.scores"))
    print(json.dumps({"tensors": len(ta), "same_names": set(ta) == set(tb), "differing_tensors": differ,
                      "same_vocabulary": vocab}))
    return set(ta) == set(tb) and not differ and vocab


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "tokenizer":
        tokenizer(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "fetch":
        fetch(sys.argv[2])
    elif len(sys.argv) == 4 and sys.argv[1] == "same":
        sys.exit(0 if same(sys.argv[2], sys.argv[3]) else 1)
    else:
        sys.exit(__doc__)
