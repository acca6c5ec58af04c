"""The baseline of chat_tokens_vs_hf.sh: transformers' apply_chat_template
(tokenize=True, the fast tokenizer, one thread) over the same conversations,
with return_assistant_tokens_mask where the template has {% generation %}
blocks. Prints one JSON line like chat_tokens_bench's.

    python chat_tokens_hf.py MODEL_FOLDER TEMPLATE CONVERSATIONS.json N
"""
import json
import os
import sys
import time

os.environ["TOKENIZERS_PARALLELISM"] = "false"
os.environ["RAYON_NUM_THREADS"] = "1"

from transformers import AutoTokenizer  # noqa: E402


def main():
    folder, template_file, conv_file, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    tok = AutoTokenizer.from_pretrained(folder)
    template = open(template_file).read()
    convs = json.load(open(conv_file))
    masks = "{% generation" in template
    tokens = trained = 0
    start = time.perf_counter()
    for i in range(n):
        out = tok.apply_chat_template(convs[i % len(convs)], chat_template=template, tokenize=True, return_dict=True,
                                      return_assistant_tokens_mask=masks)
        tokens += len(out["input_ids"])
        if masks:
            trained += sum(out["assistant_masks"])
    seconds = time.perf_counter() - start
    print(json.dumps({"conversations": n, "seconds": round(seconds, 3), "tokens": tokens, "trained": trained}))


if __name__ == "__main__":
    main()
