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
      to the template) and as the text.
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


def tools(root, model_dir, tok_root):
    """A copy of the chat model trained to answer the tools conversation with TOOL_REPLY."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    here = os.path.dirname(os.path.abspath(__file__))
    with open(os.path.join(here, "data", "chat_templates", "llamacpp_Qwen-Qwen2.5-7B-Instruct.jinja")) as f:
        template = f.read()
    out = os.path.join(root, "tools")
    os.makedirs(out, exist_ok=True)
    write_tokenizer(out, tok_root, template)
    tok = AutoTokenizer.from_pretrained(out)
    messages = [{"role": "user", "content": "What is the weather in Paris and in Tokyo?"}]
    prompt = tok.apply_chat_template(messages, tools=TOOLS, tokenize=False, add_generation_prompt=True)
    prompt_ids = tok(prompt, add_special_tokens=False)["input_ids"]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    reply_ids = tok(TOOL_REPLY, add_special_tokens=False)["input_ids"] + [im_end]
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32, attn_implementation="eager")
    model.config.max_position_embeddings = 1024  # the template's tool instructions take a few hundred tokens
    # Trained on the reply's tokens alone until greedy decoding gives them;
    # one thread, as the other tests run beside it.
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
        new, margins = greedy(model, prompt_t, eos=im_end, new_tokens=len(reply_ids) + 8)
        print(f"tools model: loss {loss.item():.4f}, {sum(a == b for a, b in zip(new, reply_ids))} of {len(reply_ids)} "
              f"tokens, margin {min(margins):.3f}", file=sys.stderr)
        if new == reply_ids and min(margins) > 0.5:
            break
    else:
        sys.exit("the tools model did not learn its reply")
    torch.set_num_threads(threads)
    model.save_pretrained(out, safe_serialization=True)
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
