#!/usr/bin/env python3
"""lm-eval against `tailor serve`, run with the project's .venv (lm_eval with
its api extra, transformers): the same small tasks through lm-eval's own `hf`
backend and through its `local-completions` client must give the same answer
to every request.

  lm_eval_check.py model DIR
      DIR/model/ gets a tiny Qwen2-style model with a byte-level BPE tokenizer
      that AutoTokenizer loads (generate_reference.py chat DIR; context 256).
  lm_eval_check.py tasks DIR
      DIR/tasks/ gets the lm-eval task group tailor_check, read from local
      JSONL files (no Hub): tailor_check_choice (multiple_choice, that is
      loglikelihood requests), tailor_check_cloze (loglikelihood, one of them
      the model's greedy continuation), tailor_check_generate (generate_until,
      greedy, 16 tokens at most, stopping at "\\n" or ".") and
      tailor_check_rolling (loglikelihood_rolling).
  lm_eval_check.py compare DIR MODEL_DIR COMPLETIONS_URL CHAT_URL
      runs lm-eval on DIR/tasks twice, fixed seeds, samples logged: with `hf`
      on MODEL_DIR (fp32, CPU, batch size 1) and with `local-completions`
      posting 4 requests at a time (batch size 4) to COMPLETIONS_URL, the
      whole completions URL (lm-eval posts to it as it is:
      http://HOST:PORT/v1/completions), with MODEL_DIR's tokenizer and
      OPENAI_API_KEY from the environment as its bearer token.
      Each request, matched by task, doc id and request index, must agree:
      log-likelihoods within 1e-4 and the same is_greedy, generations the same
      string. Then the same with the chat template on tailor_check_generate
      alone: `hf` renders each question as a user turn with MODEL_DIR's chat
      template, `local-chat-completions` posts the turn to CHAT_URL (the whole
      chat completions URL), and the generations must be equal. lm-eval runs
      in this process, as its CLI would run it (see run_lm_eval). Prints a
      JSON summary of both ({"completions": ..., "chat": ...}, each with
      "ok"); exits 1, naming each mismatch on stderr, when one differs or
      lm-eval fails.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "runner"))
import generate_reference  # noqa: E402

TOLERANCE = 1e-4  # absolute, on each (summed) log-likelihood
GROUP = "tailor_check"

CHOICE_DOCS = [
    {"question": "What color is the sky on a clear day?", "choices": ["blue", "green", "red", "black"], "answer": 0},
    {"question": "How many legs does a dog have?", "choices": ["two", "four", "six"], "answer": 1},
    {"question": "Which animal says moo?", "choices": ["a cat", "a duck", "a cow", "a horse"], "answer": 2},
    {"question": "What do bees make?", "choices": ["milk", "honey", "bread"], "answer": 1},
    {"question": "Where does the sun rise?", "choices": ["in the west", "in the north", "in the east"], "answer": 2},
    {"question": "What is ice made of?", "choices": ["water", "sand", "glass", "wood"], "answer": 0},
]
# The tiny model's greedy answers are bytes of other scripts (U+FFFD where a
# character is cut): two of these stop at ".", two run the 16 tokens, and at
# each step the two best logits are at least 0.01 apart.
GENERATE_DOCS = [
    {"question": "What is two plus three?", "answer": "five"},
    {"question": "Who wrote Hamlet?", "answer": "Shakespeare"},
    {"question": "What do plants need to grow?", "answer": "water"},
    {"question": "What color is grass?", "answer": "green"},
]
# The first continuation is the model's greedy one (is_greedy true, each of
# its tokens ahead by 0.7), so that a wrong top_logprobs shows; the others
# are not.
CLOZE_DOCS = [
    {"context": "Question: What does the bee say?\nAnswer: z", "continuation": "zzz"},
    {"context": "Question: What color is the sky?\nAnswer:", "continuation": " blue"},
    {"context": "The river flows past the old mill and into the quiet", "continuation": " lake"},
]
ROLLING_DOCS = [
    {"text": "The river flows past the old mill and into the quiet lake, where children swim in the summer "
             "and skate in the winter."},
    {"text": "Every morning the baker opens his shop at six. By seven the shelves are full of warm bread, "
             "and a line of people waits at the door."},
    {"text": "Rain fell all night on the small town. In the morning the streets were clean, the air was cool, "
             "and the birds sang again."},
]

# name: (lm-eval config, docs); the JSONL path is added when written.
TASKS = {
    "tailor_check_choice": ({
        "output_type": "multiple_choice",
        "doc_to_text": "Question: {{question}}\nAnswer:",
        "doc_to_choice": "choices",
        "doc_to_target": "answer",
        "metric_list": [{"metric": "acc"}],
    }, CHOICE_DOCS),
    "tailor_check_cloze": ({
        "output_type": "loglikelihood",
        "doc_to_text": "{{context}}",
        "doc_to_target": "{{continuation}}",
        "target_delimiter": "",
        "metric_list": [{"metric": "perplexity"}, {"metric": "acc"}],
    }, CLOZE_DOCS),
    "tailor_check_generate": ({
        "output_type": "generate_until",
        "doc_to_text": "Q: {{question}}\nA:",
        "doc_to_target": " {{answer}}",
        "generation_kwargs": {"until": ["\n", "."], "max_gen_toks": 16, "do_sample": False, "temperature": 0.0},
        "metric_list": [{"metric": "exact_match"}],
    }, GENERATE_DOCS),
    "tailor_check_rolling": ({
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{text}}",
        "metric_list": [{"metric": "word_perplexity"}, {"metric": "byte_perplexity"}, {"metric": "bits_per_byte"}],
    }, ROLLING_DOCS),
}
# The requests each output type makes.
REQUEST_KIND = {"multiple_choice": "loglikelihood", "loglikelihood": "loglikelihood",
                "generate_until": "generate_until", "loglikelihood_rolling": "loglikelihood_rolling"}


def write_yaml(path, config):
    # JSON is YAML, and keeps "\n" in the prompts readable.
    with open(path, "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")


def tasks(root):
    out = os.path.join(os.path.abspath(root), "tasks")
    os.makedirs(out, exist_ok=True)
    for name, (config, docs) in TASKS.items():
        data = os.path.join(out, name + ".jsonl")
        with open(data, "w") as f:
            f.writelines(json.dumps(doc) + "\n" for doc in docs)
        # datasets' json builder on an absolute path: nothing from the Hub.
        task = {"task": name, "dataset_path": "json", "dataset_kwargs": {"data_files": {"test": data}},
                "test_split": "test", **config, "metadata": {"version": 1.0}}
        write_yaml(os.path.join(out, name + ".yaml"), task)
    write_yaml(os.path.join(out, GROUP + ".yaml"),
               {"group": GROUP, "task": list(TASKS), "metadata": {"version": 1.0}})


def run_lm_eval(root, name, model_type, model_args, device=None, chat=False, tasks=(GROUP,), batch_size=1):
    """Runs lm-eval on `tasks` (the group, or some of its tasks) in this
    process, as `lm_eval run --model MODEL_TYPE --model_args MODEL_ARGS
    --tasks TASKS --include_path DIR/tasks --batch_size BATCH_SIZE --seed 1234
    --log_samples [--apply_chat_template]` does (its CLI calls the same
    simple_evaluate), except that the task index holds DIR/tasks alone: the
    CLI indexes the 26,629 task files lm-eval ships first, about 60% of a run
    here. Returns its seconds and its responses, {(task, doc id, request
    index): response}."""
    from lm_eval import simple_evaluate
    from lm_eval.tasks import TaskManager
    start = time.monotonic()
    try:
        results = simple_evaluate(
            model=model_type, model_args=model_args, tasks=list(tasks), batch_size=batch_size, device=device,
            log_samples=True, apply_chat_template=chat, fewshot_as_multiturn=chat,
            task_manager=TaskManager(include_path=os.path.join(root, "tasks"), include_defaults=False),
            random_seed=1234, numpy_random_seed=1234, torch_random_seed=1234, fewshot_random_seed=1234)
    except Exception as e:  # noqa: BLE001 - whatever lm-eval raised names the failure
        sys.exit(f"lm_eval_check.py: lm-eval {name} with {model_type} failed: {type(e).__name__}: {e}")
    seconds = time.monotonic() - start
    if results is None:
        sys.exit(f"lm_eval_check.py: lm-eval {name} with {model_type} returned no results")
    responses = {}
    for task in (TASKS if tasks == (GROUP,) else tasks):
        samples = results["samples"].get(task)
        if not samples:
            sys.exit(f"lm_eval_check.py: lm-eval {name} logged no samples of {task}")
        for sample in samples:
            # resps: per request, the list of its responses (one: no repeats).
            for i, resp in enumerate(sample["resps"]):
                responses[task, sample["doc_id"], i] = resp[0]
    return seconds, responses


def agreement(kind, a, b):
    """The absolute difference of two responses to one request (0 for
    generations) and whether they agree: (log-likelihood, is_greedy) for
    loglikelihood, a log-likelihood for rolling, a string for generations."""
    if kind == "generate_until":
        return 0.0, a == b
    if kind == "loglikelihood":
        (a, a_greedy), (b, b_greedy) = a, b
    else:
        a_greedy = b_greedy = None
    diff = abs(float(a) - float(b))
    return diff, diff <= TOLERANCE and a_greedy == b_greedy


def compare_one(root, model_dir, base_url, chat):
    """One comparison: the server's responses against hf's, request by
    request; returns its summary and whether every request agreed."""
    if chat:
        # The generative task as conversations: the prompt a user turn, rendered
        # with the model's chat template by the server and by the hf backend.
        tasks = ("tailor_check_generate",)
        server_type, server_args = "local-chat-completions", f"base_url={base_url},model=tailor,num_concurrent=1,max_retries=1"
    else:
        tasks = (GROUP,)
        server_type = "local-completions"
        server_args = (f"base_url={base_url},tokenizer_backend=huggingface,tokenizer={model_dir},model=tailor,"
                       "max_length=256,num_concurrent=1,max_retries=1")
    suffix = "-chat" if chat else ""
    # The server first: a server that is down fails in seconds. Completions
    # 4 to a request (several prompts scored in one pass, generated
    # together); lm-eval's chat client posts one conversation a request.
    server_seconds, server = run_lm_eval(root, "server" + suffix, server_type, server_args, chat=chat, tasks=tasks,
                                         batch_size=1 if chat else 4)
    # The device is not in model_args: lm-eval passes its own.
    hf_seconds, hf = run_lm_eval(root, "hf" + suffix, "hf", f"pretrained={model_dir},dtype=float32", device="cpu",
                                 chat=chat, tasks=tasks)
    counts = {kind: 0 for kind in REQUEST_KIND.values()}
    largest = 0.0
    mismatches = []
    for key in sorted(hf.keys() | server.keys()):
        task, doc, request = key
        kind = REQUEST_KIND[TASKS[task][0]["output_type"]]
        if key in hf and key in server:
            counts[kind] += 1
            diff, ok = agreement(kind, hf[key], server[key])
            largest = max(largest, diff)
        else:
            ok = False
        if not ok:
            m = {"task": task, "doc": doc, "request": request, "kind": kind, "hf": hf.get(key),
                 "server": server.get(key)}
            mismatches.append(m)
            print(f"lm_eval_check.py: {task}{suffix}, doc {doc}, request {request} ({kind}): hf {m['hf']!r}, "
                  f"server {m['server']!r}", file=sys.stderr)
    summary = {"requests": counts, "max_abs_diff": largest, "tolerance": TOLERANCE,
               "seconds": {"hf": round(hf_seconds, 1), "server": round(server_seconds, 1)},
               "mismatches": mismatches}
    return summary, not mismatches and sum(counts.values()) > 0


def compare(root, model_dir, completions_url, chat_url):
    root = os.path.abspath(root)
    # Offline, and a datasets cache of its own, so that the runs read only
    # DIR/tasks; set before lm-eval imports datasets.
    os.environ.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                      HF_DATASETS_CACHE=os.path.join(root, "lm_eval", "datasets"), TOKENIZERS_PARALLELISM="false")
    completions, completions_ok = compare_one(root, model_dir, completions_url, chat=False)
    chat, chat_ok = compare_one(root, model_dir, chat_url, chat=True)
    print(json.dumps({"completions": dict(completions, ok=completions_ok), "chat": dict(chat, ok=chat_ok)},
                     indent=1, ensure_ascii=False, default=str))
    return completions_ok and chat_ok


def main():
    if len(sys.argv) == 3 and sys.argv[1] == "model":
        generate_reference.chat(sys.argv[2])
    elif len(sys.argv) == 3 and sys.argv[1] == "tasks":
        tasks(sys.argv[2])
    elif len(sys.argv) == 6 and sys.argv[1] == "compare":
        sys.exit(0 if compare(*sys.argv[2:]) else 1)
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
