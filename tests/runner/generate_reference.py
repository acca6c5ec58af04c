#!/usr/bin/env python3
"""The Hugging Face side of tests/runner/torch/generation_test.cpp, run with the
project's .venv (transformers and PEFT on the same torch).

  generate_reference.py make DIR FAMILY...
      for each family, DIR/FAMILY/ gets base/ (a tiny random model, as
      hf_reference.py makes them, with room for 128 positions and no EOS, so
      that every generation runs its 64 tokens), adapter/ (a PEFT LoRA adapter
      with non-zero B whose base_model_name_or_path is base/) and
      reference.json: a 12-token prompt and transformers' greedy generate() of
      64 tokens with the base and with the adapter, with each step's margin
      between the two largest logits (a near tie may go either way in fp32);
      and the base's greedy tokens with penalties: "repetition" with
      repetition_penalty 1.3, "openai" with repetition_penalty 1.2 and
      OpenAI's presence_penalty 0.7 and frequency_penalty 0.4 (a logits
      processor after transformers' own, as OpenAI's API reference gives
      the formula: logit[j] -= c[j] * frequency + (c[j] > 0) * presence, c[j]
      the times j was generated so far); "bias" with logit biases (transformers'
      sequence_bias of one-token sequences: -100 on the base's first two
      tokens, +1.5 on another) and repetition_penalty 1.2.
      DIR/warpers.json: random logits and, for each of a list of sampling
      settings, the probabilities transformers' warpers (temperature, top-k,
      top-p, min-p, in generate()'s order) leave after a softmax.
  generate_reference.py chat DIR [--tools]
      DIR/ gets a Qwen2-style model with a trained byte-level BPE tokenizer and
      a ChatML template in tokenizer_config.json (EOS <|im_end|>),
      conversation.json, and reference.json: the prompt ids of
      apply_chat_template(add_generation_prompt=True) and generate()'s greedy
      64 tokens with their text (skip_special_tokens).
      With --tools, DIR/tools/ gets the same model, trained until its greedy reply to a
      conversation with tools is two Hermes-style tool calls after a line of
      text, with Qwen 2.5's chat template (tests/runner/data/chat_templates),
      and tools.json: the request (messages, tools), transformers' prompt
      ids and greedy reply with its text, the calls read from that text as
      vLLM's hermes parser reads them (Python's json), and the prompt
      lengths of a conversation with an earlier call whose arguments are
      given as JSON text: rendered with them as objects (as vLLM gives them
      to the template) and as the text. DIR/llama3_tools/ gets the same model
      with Meta's Llama 3.1 template and its special tokens added, trained
      until its reply to a conversation with tools is one JSON call, and
      llama3_tools.json: the request, the prompt ids, the greedy reply with
      its text, the call read as vLLM's llama3_json parser reads it (Python's
      json.JSONDecoder.raw_decode and json.dumps), and that reading of a list
      of other replies ("cases").
"""
import re
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import hf_reference as hf  # noqa: E402

NEW_TOKENS = 64
PROMPT_TOKENS = 12
CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + "
          "'<|im_end|>' + '\\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}")


def tiny_model(cfg):
    # Matrices 4x their init, so that the logits are far from ties.
    return hf.base_model(cfg=cfg, weight_scale=4.0)


class OpenAIPenalties:
    """OpenAI's presence and frequency penalties over the tokens generated after the first `prompt_length`."""

    def __init__(self, prompt_length, presence, frequency):
        self.prompt_length, self.presence, self.frequency = prompt_length, presence, frequency

    def __call__(self, input_ids, scores):
        generated = input_ids[:, self.prompt_length:]
        counts = torch.zeros_like(scores).scatter_add_(1, generated, torch.ones_like(generated, dtype=scores.dtype))
        return scores - counts * self.frequency - (counts > 0).to(scores.dtype) * self.presence


def warpers(root):
    from transformers import LogitsProcessorList, MinPLogitsWarper, TemperatureLogitsWarper, TopKLogitsWarper, \
        TopPLogitsWarper
    logits = torch.randn(1, 96, generator=torch.Generator().manual_seed(11)) * 3
    cases = []
    for t, k, p, m in [(1.0, 0, 1.0, 0.0), (0.7, 0, 1.0, 0.0), (1.3, 10, 1.0, 0.0), (1.0, 0, 0.9, 0.0),
                       (0.8, 20, 0.8, 0.0), (1.0, 0, 1.0, 0.1), (1.5, 0, 1.0, 0.05), (0.9, 30, 0.95, 0.2),
                       (2.0, 0, 0.5, 0.3), (1.0, 1, 1.0, 0.0), (1.0, 0, 1.0, 1.0)]:
        processors = LogitsProcessorList()
        # generate()'s own order and conditions (GenerationMixin._get_logits_processor)
        if t != 1.0:
            processors.append(TemperatureLogitsWarper(t))
        if k != 0:
            processors.append(TopKLogitsWarper(top_k=k))
        if p < 1.0:
            processors.append(TopPLogitsWarper(top_p=p))
        if m > 0:
            processors.append(MinPLogitsWarper(min_p=m))
        probs = torch.softmax(processors(None, logits.clone()), -1)[0]
        cases.append({"temperature": t, "top_k": k, "top_p": p, "min_p": m, "probs": probs.tolist()})
    with open(os.path.join(root, "warpers.json"), "w") as f:
        json.dump({"logits": logits[0].tolist(), "cases": cases}, f)


def greedy(model, ids, eos=None, new_tokens=NEW_TOKENS, **penalties):
    from transformers import LogitsProcessorList
    processors = LogitsProcessorList()
    if "presence_penalty" in penalties:
        processors.append(OpenAIPenalties(ids.size(1), penalties.pop("presence_penalty"),
                                          penalties.pop("frequency_penalty")))
    with torch.no_grad():
        out = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=new_tokens,
                             do_sample=False, output_scores=True, return_dict_in_generate=True,
                             eos_token_id=eos, pad_token_id=0, logits_processor=processors, **penalties)
    new = out.sequences[0, ids.size(1):].tolist()
    margins = []
    for s in out.scores:
        top = s[0].float().topk(2).values
        margins.append((top[0] - top[1]).item())
    return new, margins


def make(root, family):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM
    out = os.path.join(root, family)
    os.makedirs(out, exist_ok=True)
    cfg = dict(hf.CONFIGS[family])
    if family == "gpt2":
        cfg["n_positions"] = 128
    else:
        cfg["max_position_embeddings"] = 128
    cfg.update(bos_token_id=None, eos_token_id=None, pad_token_id=None)
    if family == "gemma2":  # caps that still bend, wide enough that greedy steps are no near ties
        cfg.update(attn_logit_softcapping=2.0, final_logit_softcapping=3.0)
    model = tiny_model(cfg)
    model.generation_config.eos_token_id = None
    model.generation_config.bos_token_id = None
    base_dir = os.path.join(out, "base")
    model.save_pretrained(base_dir, safe_serialization=True)
    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32, attn_implementation="eager").eval()
    ids = torch.randint(3, cfg["vocab_size"], (1, PROMPT_TOKENS), generator=torch.Generator().manual_seed(5))
    base_ids, base_margins = greedy(model, ids)
    repetition_ids, repetition_margins = greedy(model, ids, repetition_penalty=1.3)
    openai_ids, openai_margins = greedy(model, ids, repetition_penalty=1.2, presence_penalty=0.7,
                                        frequency_penalty=0.4)
    other = next(t for t in range(3, cfg["vocab_size"]) if t not in base_ids[:8])
    bias = [[base_ids[0], -100.0], [base_ids[1], -100.0], [other, 1.5]]
    bias_ids, bias_margins = greedy(model, ids, repetition_penalty=1.2,
                                    sequence_bias={(t,): b for t, b in bias})
    lora = LoraConfig(r=4, lora_alpha=8, lora_dropout=0.0, target_modules=hf.TARGETS.get(family, hf.LLAMA_TARGETS),
                      init_lora_weights=False, task_type="CAUSAL_LM")
    peft_model = get_peft_model(model, lora).eval()
    with torch.no_grad():  # B larger than PEFT's small random init, so the adapter changes the tokens
        for name, p in peft_model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn_like(p) * 0.5)
    peft_model.save_pretrained(os.path.join(out, "adapter"))
    adapter_ids, adapter_margins = greedy(peft_model, ids)
    with open(os.path.join(out, "reference.json"), "w") as f:
        json.dump({"prompt": ids[0].tolist(), "base": base_ids, "base_margins": base_margins,
                   "adapter": adapter_ids, "adapter_margins": adapter_margins,
                   "repetition": repetition_ids, "repetition_margins": repetition_margins,
                   "openai": openai_ids, "openai_margins": openai_margins,
                   "logit_bias": bias, "bias": bias_ids, "bias_margins": bias_margins}, f)


def write_tokenizer(folder, tok_root, template):
    """The trained Qwen2-style tokenizer and `template` into a model folder (EOS <|im_end|>)."""
    with open(os.path.join(tok_root, "qwen2", "tokenizer.json")) as f:
        tokenizer_json = f.read()
    with open(os.path.join(folder, "tokenizer.json"), "w") as f:
        f.write(tokenizer_json)
    with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": None, "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>",
                   "chat_template": template}, f)


def chat(root, with_tools=False):
    from transformers import AutoModelForCausalLM, AutoTokenizer
    os.makedirs(root, exist_ok=True)
    tok_root = os.path.join(root, "tokenizers")
    os.makedirs(tok_root, exist_ok=True)
    hf.train_tokenizers(tok_root)
    with open(os.path.join(tok_root, "qwen2", "tokenizer.json")) as f:
        vocab = len(json.load(f)["model"]["vocab"]) + 3
    cfg = dict(hf.CONFIGS["qwen2"], vocab_size=vocab, max_position_embeddings=256)
    model = tiny_model(cfg)
    model_dir = os.path.join(root, "model")
    model.save_pretrained(model_dir, safe_serialization=True)
    write_tokenizer(model_dir, tok_root, CHATML)
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager").eval()
    messages = [{"role": "system", "content": "You answer in one word."},
                {"role": "user", "content": "Grüße aus München! Which city is the capital of Japan?"}]
    with open(os.path.join(root, "conversation.json"), "w") as f:
        json.dump(messages, f, ensure_ascii=False)
    text = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([tok(text, add_special_tokens=False)["input_ids"]])
    new, margins = greedy(model, ids, eos=tok.convert_tokens_to_ids("<|im_end|>"))
    with open(os.path.join(root, "reference.json"), "w") as f:
        json.dump({"prompt": ids[0].tolist(), "ids": new, "margins": margins,
                   "text": tok.decode(new, skip_special_tokens=True),
                   "im_end": tok.convert_tokens_to_ids("<|im_end|>")}, f, ensure_ascii=False)
    if with_tools:
        tools(root, model_dir, tok_root)
        llama3_tools(root, model_dir, tok_root)


TOOLS = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city now.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"},
                                                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
                   "required": ["city"]}}}]
TOOL_REPLY = ('Checking both.\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}'
              '\n</tool_call>\n<tool_call>\n{"name": "get_weather", "arguments": {"city": "東京"}}\n</tool_call>')


def hermes_calls(text):
    """vLLM's hermes parser (extract_tool_calls) on a reply's text."""
    if "<tool_call>" not in text:
        return None, text
    calls = []
    for closed, unclosed in re.findall(r"<tool_call>(.*?)</tool_call>|<tool_call>(.*)", text, re.DOTALL):
        call = json.loads(closed if closed else unclosed)
        calls.append({"name": call["name"], "arguments": json.dumps(call["arguments"], ensure_ascii=False)})
    content = text[:text.find("<tool_call>")]
    return calls, content if content else None


def train_reply(model_dir, out, prompt_ids, reply_ids, eos, what, vocab=None):
    """A copy of the chat model trained on reply_ids after prompt_ids until greedy decoding gives them."""
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    if vocab is not None:
        model.resize_token_embeddings(vocab, mean_resizing=False)
    model.config.max_position_embeddings = 1024  # the template's tool instructions take a few hundred tokens
    # Trained on the reply's tokens alone; one thread, as the other tests
    # run beside it.
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    ids = torch.tensor([prompt_ids + reply_ids])
    labels = ids.clone()
    labels[0, :len(prompt_ids)] = -100
    torch.manual_seed(0)
    opt = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    prompt_t = torch.tensor([prompt_ids])
    for _ in range(40):
        model.train()
        for _ in range(25):
            opt.zero_grad()
            loss = model(input_ids=ids, labels=labels).loss
            loss.backward()
            opt.step()
        model.eval()
        new, margins = greedy(model, prompt_t, eos=eos, new_tokens=len(reply_ids) + 8)
        print(f"{what} model: loss {loss.item():.4f}, {sum(a == b for a, b in zip(new, reply_ids))} of "
              f"{len(reply_ids)} tokens, margin {min(margins):.3f}", file=sys.stderr)
        if new == reply_ids and min(margins) > 0.5:
            break
    else:
        sys.exit(f"the {what} model did not learn its reply")
    torch.set_num_threads(threads)
    model.save_pretrained(out, safe_serialization=True)
    return new, margins


def read_template(name):
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "data", "chat_templates", name)) as f:
        return f.read()


def tools_prompt_and_reply(tok, messages, reply, eos_token):
    """The ids of the tools conversation's prompt, of `reply` and its end-of-turn token, and that token's id."""
    prompt = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    eos = tok.convert_tokens_to_ids(eos_token)
    return (tok(prompt, add_special_tokens=False)["input_ids"],
            tok(reply, add_special_tokens=False)["input_ids"] + [eos], eos)


def tools(root, model_dir, tok_root):
    """A copy of the chat model trained to answer the tools conversation with TOOL_REPLY."""
    from transformers import AutoTokenizer
    out = os.path.join(root, "tools")
    os.makedirs(out, exist_ok=True)
    write_tokenizer(out, tok_root, read_template("llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja"))
    tok = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": "What is the weather in Paris and in Tokyo?"}]
    prompt_ids, reply_ids, im_end = tools_prompt_and_reply(tok, messages, TOOL_REPLY, "<|im_end|>")
    new, margins = train_reply(model_dir, out, prompt_ids, reply_ids, im_end, "tools")
    text = tok.decode(new, skip_special_tokens=True)
    calls, content = hermes_calls(text)
    # An earlier call with its arguments as JSON text, and its result.
    history = messages + [
        {"role": "assistant", "content": "", "tool_calls": [{"id": "call_1", "type": "function", "function": {
            "name": "get_weather", "arguments": '{"city": "Paris", "unit": "celsius"}'}}]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temperature": 21}'}]
    as_objects = json.loads(json.dumps(history))
    as_objects[1]["tool_calls"][0]["function"]["arguments"] = {"city": "Paris", "unit": "celsius"}

    def prompt_length(msgs):
        text = tok.apply_chat_template(msgs, tools=TOOLS, tokenize=False, add_generation_prompt=True)
        return len(tok(text, add_special_tokens=False)["input_ids"])
    with open(os.path.join(root, "tools.json"), "w") as f:
        json.dump({"messages": messages, "tools": TOOLS, "prompt": prompt_ids, "ids": new, "text": text,
                   "margins": margins, "tool_calls": calls, "content": content, "history": history,
                   "history_prompt_tokens": prompt_length(as_objects),
                   "history_prompt_tokens_as_text": prompt_length(history)}, f, ensure_ascii=False)


# Meta's Llama 3.1 template writes a call as this object (with "parameters")
# and ends the turn with <|eot_id|>; its special tokens are added to the
# trained tokenizer.
LLAMA3_TOOL_REPLY = '{"name": "get_weather", "parameters": {"city": "東京", "unit": "celsius"}}'
LLAMA3_SPECIAL = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>", "<|eom_id|>",
                  "<|python_tag|>"]
# Replies read by llama3_calls, for the C++ reader to read the same.
LLAMA3_CASES = [
    '{"name": "f", "parameters": {"z": 1, "a": [1.5e3, -0.0, 1E-7, true, null], "s": "b{r}ace \\" \\\\ \\u00e9 東京"}}',
    '<|python_tag|>{"name": "f", "arguments": {"x": 1}, "parameters": 2}; {"name": "g", "parameters": "t"}',
    'Here you go: {"name": "f", "parameters": {}} and then {"name": "g", "parameters": [1, {"k": {}}]} done.',
    '{"name": "f", "parameters": {}}{"name": "g", "parameters": {}}',
    '{"name": "f", "parameters": {"a": 1, "a": 2}}',
    '{"name": "f", "parameters": 12345678901234567}',
    '{"name": "f"}',
    '{"name": 1, "parameters": {}}',
    '{"name": "f", "parameters": {}}; {"oops": 1}',
    '{"name": "f", "parameters": {',
    'Use {braces} like this.',
    '{"name": "f", "parameters": {]}',
    'No call at all.',
    '<|python_tag|>no object',
]


def llama3_calls(text):
    """vLLM's llama3_json parser (extract_tool_calls, the JSON-decoder version) on a reply's text."""
    if "<|python_tag|>" not in text and "{" not in text:
        return None, text
    decoder = json.JSONDecoder()
    end = -1
    calls = []
    for match in re.finditer(r"\{", text):
        start = match.start()
        if start <= end:
            continue
        try:
            obj, length = decoder.raw_decode(text[start:])
            end = start + length
            name = obj["name"]
            arguments = obj["arguments"] if "arguments" in obj else obj["parameters"]
            if not isinstance(name, str):  # FunctionCall's name is a str (pydantic refuses others)
                raise TypeError(name)
            calls.append({"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)})
        except Exception:
            return None, text
    return (calls, None) if calls else (None, text)


def llama3_tools(root, model_dir, tok_root):
    """A copy of the chat model with Llama 3.1's template, trained to answer with one JSON call."""
    from transformers import AutoTokenizer
    out = os.path.join(root, "llama3_tools")
    os.makedirs(out, exist_ok=True)
    write_tokenizer(out, tok_root, read_template("llamacpp_meta-llama-Llama-3.1-8B-Instruct.jinja"))
    tok = AutoTokenizer.from_pretrained(out)
    tok.add_special_tokens({"additional_special_tokens": LLAMA3_SPECIAL})
    tok.bos_token = "<|begin_of_text|>"
    tok.eos_token = "<|eot_id|>"
    tok.save_pretrained(out)
    tok = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": "What is the weather in Tokyo?"}]
    prompt_ids, reply_ids, eot = tools_prompt_and_reply(tok, messages, LLAMA3_TOOL_REPLY, "<|eot_id|>")
    new, margins = train_reply(model_dir, out, prompt_ids, reply_ids, eot, "llama3 tools", vocab=len(tok))
    text = tok.decode(new, skip_special_tokens=True)
    calls, content = llama3_calls(text)
    cases = [{"text": t, "calls": c, "content": s} for t, (c, s) in ((t, llama3_calls(t)) for t in LLAMA3_CASES)]
    with open(os.path.join(root, "llama3_tools.json"), "w") as f:
        json.dump({"messages": messages, "tools": TOOLS, "prompt": prompt_ids, "ids": new, "text": text,
                   "margins": margins, "tool_calls": calls, "content": content, "cases": cases}, f,
                  ensure_ascii=False)


def main():
    if len(sys.argv) in (3, 4) and sys.argv[1] == "chat" and sys.argv[3:] in ([], ["--tools"]):
        chat(sys.argv[2], sys.argv[3:] == ["--tools"])
        return
    if len(sys.argv) < 4 or sys.argv[1] != "make":
        sys.exit(__doc__)
    for family in sys.argv[3:]:
        make(sys.argv[2], family)
    warpers(sys.argv[2])


if __name__ == "__main__":
    main()
