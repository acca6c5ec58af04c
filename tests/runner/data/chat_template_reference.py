"""Reference renderings of the chat templates under chat_templates/.

Renders every (template, conversation, flags) case with transformers' own
render_jinja_template, so the jinja2 environment, its extensions
(AssistantTracker, loopcontrols) and globals are the real ones, and writes
the inputs with the expected text, error or {% generation %} spans as JSON
for chat_template_test.cpp.

    python chat_template_reference.py OUT.json

The conversations come from chat_conversations.json when it exists beside
this script, else from conversations(), a fixed-seed generator.
"""

import json
import random
import re
import sys
import time
from pathlib import Path

import transformers
from transformers.utils.chat_template_utils import render_jinja_template

HERE = Path(__file__).resolve().parent

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the current weather in a city.",
            "parameters": {
                "type": "object",
                "properties": {
                    "city": {"type": "string", "description": "The city, e.g. Paris"},
                    "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
                },
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the web. Returns the top results — titles and snippets.",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "max_results": {"type": "integer", "default": 5},
                    "safe": {"type": "boolean"},
                    "score": {"type": "number"},
                },
                "required": ["query"],
            },
            "return": {"type": "array", "items": {"type": "string"}},
        },
    },
]

TEXTS = [
    "Hello!",
    "What is the capital of France?",
    "The capital of France is Paris.",
    "",
    "   leading and trailing spaces   ",
    "\nstarts and ends with newlines\n\n",
    "line one\nline two\n\nline four",
    "Tabs\tand\\backslashes\\ and \"quotes\" and 'single quotes'",
    "你好，世界！请用中文回答。",
    "日本語のテキストです。カタカナとひらがな。",
    "Emoji: 😀🎉👍🏽 and a family 👨‍👩‍👧‍👦",
    "Combining marks: e\u0301 a\u0308 n\u0303 — Z\u0335\u0321a\u0336l\u0334g\u0337o",
    "Ünïcödé Çàsé ÀÉÎÕÜ ß straße",
    "Привет, как дела? Ελληνικά κείμενα.",
    "مرحبا بالعالم",
    "Template-looking text: {{ messages }} {% if x %} {# c #}",
    "JSON-looking: {\"a\": [1, 2, {\"b\": null}]}",
    "<think>\nLet me think about this.\n</think>\n\nThe answer is 42.",
    "A very long answer. " * 40,
    "Code:\n```python\ndef f(x):\n    return x * 2\n```\n",
    "Special tokens in text: <|im_start|> </s> [INST] <start_of_turn>",
    "Zero\u200bwidth and non\u00a0breaking spaces",
    "Numbers 3.14159 and -42 and 1e10",
    "\t\n  \n",
]

REASONING = [
    "The user wants a capital city. France's capital is Paris.",
    "Need to call a tool first.",
    "思考：这是一个简单的问题。",
]


# Small templates that each pin down one piece of jinja2's semantics; the
# expected output is whatever jinja2 renders, never ours.
SNIPPET_VARIABLES = {
    "s": "Héllo wörld 😀",
    "n": 7,
    "f": 2.5,
    "l": [3, 1, 2],
    "d": {"b": 1, "a": [1, {"x": None}]},
    "e": "",
    "z": 0,
    "t": True,
    "bos_token": "<s>",
    "eos_token": "</s>",
}
SNIPPET_MESSAGES = [
    {"role": "system", "content": "  Be brief.  "},
    {"role": "user", "content": "Hi <there> & \"you\""},
    {"role": "assistant", "content": None},
    {"role": "user", "content": "日本"},
]
SNIPPETS = [
    "{{ s|length }} {{ s|upper }} {{ s|lower }} {{ s|title }} {{ s|capitalize }} {{ s[::-1] }} {{ s[2:5] }}",
    "{{ s.split() }} {{ s.split('l') }} {{ s.rsplit('l', 1) }} {{ s.replace('l', 'L', 1) }}",
    "{{ s.find('w') }} {{ s.rfind('l') }} {{ s.count('l') }} {{ s.startswith(('x', 'H')) }} {{ s.endswith('😀') }}",
    "{{ s.center(20, '*') }}|{{ 'ab'.ljust(5) }}|{{ 'ab'.rjust(5, '0') }}|{{ '-5'.zfill(4) }}|{{ 'abc'.center(8) }}",
    "{{ '  x '.strip() }}|{{ 'xyx'.strip('x') }}|{{ '\t a\n'.lstrip() }}|{{ 'a\n'.rstrip() }}|{{ 'a\u3000'.strip() }}",
    "{{ 'a b c'.split(' ', 1) }} {{ ''.split() }} {{ ''.split(',') }} {{ 'a\nb\r\nc'.splitlines() }} {{ ' a b '.rsplit(None, 1) }}",
    "{{ 'Hello World'.title() }} {{ \"they're bill's\".title() }} {{ 'hello-world foo_bar (x)'|title }} {{ 'aBc'.swapcase() }}",
    "{{ 1/3 }} {{ 2/2 }} {{ 10**15 }} {{ 2**-1 }} {{ 2 ** 3 ** 2 }}",
    "{{ 1e-5 }} {{ 1e16 }} {{ 1.5e15 }} {{ 0.1 }} {{ -0.0 }} {{ 3.0 * 2 }} {{ 7 % -3 }} {{ -7.5 // 2 }} {{ 7.5 % 2 }} {{ -7 // 2.0 }}",
    "{{ 0.1 + 0.7 }} {{ 1/7 }} {{ 123456789.123456789 }} {{ 1e22 }} {{ 1.0e-7 }} {{ 5e-324 }} {{ 1.7976931348623157e308 }} {{ 12345678901234567.0 }}",
    "{{ [1,2] + [3] }} {{ (1,2) + (3,) }} {{ 'ab' * 3 }} {{ [0] * 3 }} {{ 3 * 'x' }} {{ 'a' * -1 }}",
    "{{ true + 1 }} {{ 1 == true }} {{ none == none }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 1 < 1.5 }}",
    "{{ d }} {{ d|tojson }} {{ d|tojson(indent=4) }} {{ d|tojson(sort_keys=true, indent=1) }} {{ d|tojson(separators=(',', ':')) }}",
    "{{ l|sort }} {{ l|sort(reverse=true) }} {{ ['b','A','a']|sort }} {{ ['b','A','a']|sort(case_sensitive=true) }}",
    "{{ l|min }} {{ l|max }} {{ l|sum }} {{ l|sum(start=10) }} {{ ['B','a']|max }} [{{ []|max }}]",
    "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|items|list }} {{ d.items()|list }} {{ {'B': 1, 'a': 2}|dictsort }}",
    "{{ l|join }} {{ l|join(', ') }} {{ [none, 1, 'a']|join('-') }} {{ msgs|join(',', attribute='role') }}",
    "{{ l|first }} {{ l|last }} {{ s|first }} {{ s|last }} {{ d|first }}",
    "{{ l|list }} {{ s|list }} {{ d|list }} {{ l|reverse|list }} {{ s|reverse }}",
    "{{ [1,1,2,'a','A']|unique|list }} {{ ['a','A']|unique(case_sensitive=true)|list }}",
    "{{ n|float }} {{ f|int }} {{ '0x1A'|int(0, 16) }} {{ '12abc'|int }} {{ none|int }} {{ '1e3'|float }} {{ 'x'|float }} {{ ' 42 '|int }} {{ '3.9'|int }} {{ true|int }}",
    "{{ f|round }} {{ 2.675|round(2) }} {{ 3.5|round }} {{ 4.5|round }} {{ 2.4|round(0, 'ceil') }} {{ 2.6|round(method='floor') }} {{ 7|round }} {{ 1234.5678|round(-2) }}",
    "{{ -5|abs }} {{ -2.5|abs }} {{ n is odd }} {{ n is divisibleby(7) }} {{ -f|abs }} {{ -n }} {{ +n }} {{ - -n }}",
    "{{ 'x'|default('y') }} {{ undefined_thing|default('y') }} {{ none|default('y') }} {{ none|default('y', true) }} [{{ undefined_thing|d }}]",
    "{{ s|wordcount }} {{ 'a b\nc'|wordcount }}",
    "{{ 'line1\nline2\n'|indent }}|{{ 'line1\n\nline2'|indent(3, blank=true) }}|{{ 'x'|indent(first=true) }}|{{ 'a\nb'|indent('> ') }}",
    "{{ '<a href=\"x\">&'|e }} {{ '<b>'|safe }} {{ '<b>'|safe + '<i>' }} {{ '<i>' + '<b>'|safe }} {{ '<b>'|safe ~ '<i>' }} {{ ('<b>'|safe).upper() + '&' }}",
    "{{ [1,2,3,4,5]|batch(2, 'x')|list }} {{ 'abc'|center(9) }}",
    "{{ msgs|map(attribute='role')|list }} {{ msgs|map(attribute='missing', default='?')|list }} {{ ['a','b']|map('upper')|list }} {{ [1.5, 2.5]|map('int')|list }}",
    "{{ msgs|selectattr('content')|list|length }} {{ msgs|selectattr('role', 'in', ['user', 'system'])|map(attribute='role')|join }} {{ msgs|rejectattr('content', 'none')|list|length }}",
    "{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|select('gt', 2)|list }} {{ [1,2,3,4]|reject('==', 2)|list }} {{ [none, 0, 1]|select('none')|list }} {{ none|select|list }}",
    "{% for a, b in [(1, 2), (3, 4)] %}{{ a + b }}{% endfor %}",
    "{% for x in 'abc' %}{{ loop.revindex0 }}{{ x }}{% endfor %}{% for k in d %}{{ k }}{% endfor %}",
    "{% for x in [1,2,3] %}{% set y = x * 2 %}{{ y }}{% endfor %}[{{ y }}]",
    "{% set x = 1 %}{% for i in [1] %}{{ x }}{% set x = 2 %}{{ x }}{% endfor %}{{ x }}",
    "{% for i in range(3) %}{% if i == 0 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}",
    "{% for i in [1,2] %}{% for j in [3,4] %}{{ loop.index }}{{ i }}{{ j }} {% endfor %}{{ loop.index }}{% endfor %}",
    "{% for x in [] %}a{% else %}b{% endfor %}{% for x in [1] %}a{% else %}b{% endfor %}",
    "{% for x in none %}{% endfor %}",
    "{% for x in [1,2,3] if x > 1 %}{{ loop.index }}{{ loop.first }}{{ loop.length }}{% endfor %}",
    "{{ loop is defined }}",
    "{{ loop.index }}",
    "{% set ns = namespace(a=1, b=[]) %}{% set ns.a = ns.a + 1 %}{{ ns.a }} {{ ns.b }} {{ ns.c is defined }}",
    "{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set c = (1, 2) %}{{ c }}{% set p, q = 'xy' %}{{ q }}",
    "{% set x %}  block {{ n }}  {% endset %}[{{ x }}]",
    "{% macro m(a, b=a ~ '!') %}{{ a }}{{ b }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(b=3, a=4) }}",
    "{% macro m(a) %}{{ a }}{{ kwargs }}{% endmacro %}{{ m(1, c=3) }}",
    "{% macro m() %}{{ varargs|length }}{% endmacro %}{{ m(1, 2, 3) }}",
    "{% macro m(x) %}{{ x }}{% endmacro %}[{{ m() }}]",
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1, 2) }}",
    "{{ s is string }} {{ n is number }} {{ f is float }} {{ t is boolean }} {{ d is mapping }} {{ l is sequence }} {{ l is iterable }} {{ n is iterable }} {{ none is none }} {{ e is string }} {{ t is number }} {{ t is integer }}",
    "{{ 1 is sameas 1 }} {{ none is sameas none }} {{ true is sameas true }} {{ l is sameas l }} {{ 1 is sameas true }}",
    "{{ 'upper' is filter }} {{ 'ABC' is upper }} {{ 'abc' is lower }} {{ 2 is lt 3 }} {{ 2 is le 2 }} {{ 3 is greaterthan 2 }} {{ n is callable }} {{ range is callable }}",
    "[{{ none.x }}]",
    "{{ none.x.y }}",
    "[{{ l[10] }}|{{ d['zz'] }}|{{ d.zz }}|{{ s.nope }}|{{ l['x'] }}]",
    "{{ l[10].x }}",
    "{{ d.a[1].x }} {{ d['a'][0] }} {{ d.a.1 }}",
    "{{ 'a' ~ none ~ undefined_thing ~ 1.0 ~ [1] ~ (2,) }}",
    "{{ undefined_thing + 1 }}",
    "{{ undefined_thing == undefined_other }} {{ undefined_thing != 1 }} {{ undefined_thing is defined }}",
    "{% if undefined_thing %}a{% elif n > 5 %}b{% else %}c{% endif %}",
    "[{{ 'a' if false }}]|{{ 'a' if none else 'b' }}",
    "{{ not none }} {{ not [] }} {{ not 'x' }} {{ not n > 10 }} {{ none or 0 }} {{ 0 and 1 }}",
    "{{ 10 - 2 - 3 }} {{ 2 * 3 + 4 }} {{ 2 + 3 * 4 }} {{ (2 + 3) * 4 }} {{ 'a' ~ 1 * 2 }} {{ 8 / 2 / 2 }} {{ 2 ** 2 * 3 }}",
    "{{ 'a' ~ 1 + 2 }}",
    "{{ 'abc'[1:] }}{{ 'abc'[:-1] }}{{ 'abc'[::2] }}{{ l[-1] }}{{ l[:] }}{{ l[::-1] }}[{{ 'abc'[10:] }}]{{ l[-100:2] }}{{ 'abcdef'[-2:1:-1] }}",
    "{{ {'a': 1, 'b': 2}|length }} {{ ''|length }} {{ s|count }}",
    "{{ none|length }}",
    "{{ dict(a=1, b='x') }} {{ dict([('k', 1)]) }} {{ dict({'x': 1}, y=2) }}",
    "{{ range(5)|list }} {{ range(5, 0, -2)|list }} {{ range(0)|list }} {{ range(2, 5)|list }}",
    "{{ raise_exception('boom ' ~ n) }}",
    "{% for m in msgs %}{{ m['role']|upper }}:{{ m.content|trim }};{% endfor %}",
    "{{ msgs[0] }} {{ msgs[2] }}",
    "{{ msgs|tojson }} {{ msgs[0].items()|list }} {{ msgs[1].keys()|list }} {{ msgs[1].values()|list }}",
    "{{ 'é'|tojson }} {{ '😀'|tojson(ensure_ascii=true) }} {{ '\x01\x7f\u2028'|tojson }} {{ 1.0|tojson }} {{ 1e100|tojson }} {{ [1, [2, []], {}]|tojson(indent=2) }} {{ {1: 2, true: 3}|tojson }}",
    "{{ '%s and %s'|format(1, 'b') }} {{ '%d%%'|format(5) }} {{ '{} {}'.format(1, 'x') }} {{ '{a}'.format(a=1) }} {{ '%s!' % n }} {{ '%s-%s' % (1, 2) }}",
    "{{ \"it's\" }} {{ ['it\\'s', 'a\"b', 'both\\'\"'] }}",
    "{{ ['\\n', '\\t', '\\\\', 'é', '\\x00', '\\u200b', '\\x7f', '\\xa0', '😀'] }}",
    "  {%- if true %}\n  x\n  {%- endif %}\n",
    "a\n  {% if true %}\n  b\n  {% endif %}\n  c\n",
    "{% raw %}\n  {{ x }}\n{% endraw %}\n",
    "{#- c -#}\n  a  {#+ c +#}\n b\n  {# c #}\nz",
    "a {%- if true -%} b {%+ if true %} c {% endif +%} d {%- endif -%} e",
    "  {{ n }}  \n  {% if true %}  x  {% endif %}  \n",
    "\t{% for i in l %}\n\t\t{{ i }}\n\t{% endfor %}\n",
    "{% if true %}a{% endif %}\n\n{% if true %}b{% endif %}\n",
    "{% with a = 1, b = n %}{{ a + b }}{% endwith %}[{{ a }}]",
    "{% filter upper %}x{{ n }}{% endfilter %}{% filter trim|upper %}  y  {% endfilter %}",
    "{% macro w(x) %}<{{ caller(x) }}>{% endmacro %}{% call(v) w(5) %}got {{ v }}{% endcall %}",
    "{{ 'abc' is in 'xabcx' }} {{ l.index(2) }} {{ l.count(1) }}",
    "[{{ l.append }}]",
    "{% set l2 = l %}{{ l2.append(4) }}",
    "{{ messages|length }} {{ add_generation_prompt }} {{ tools }} {{ documents }} {{ bos_token }}{{ eos_token }}",
    "{% if messages[0]['role'] == 'system' %}{% set sys = messages[0]['content'] %}{% set messages = messages[1:] %}{% endif %}{{ messages|length }}{{ sys }}",
    "{{ 5 // 0 }}",
    "{{ 5 / 0 }}",
    "{{ 5 % 0 }}",
    "{{ [1, 2] == [1, 2] }} {{ (1, 2) == [1, 2] }} {{ {'a': 1} == {'a': 1} }} {{ 1 in [1.0] }} {{ 'a' in ['a'] }} {{ none in [none] }} {{ 'b' in d }} {{ 1 in d }}",
    "{{ 1 in 'abc' }}",
    "{{ l|items|list }}",
    "{{ 'a' < 1 }}",
    "{{ x + }}",
    "{% if %}",
    "{% for x in l %}",
    "{% endfor %}",
    "{% unknown_tag %}",
    "{{ n|no_such_filter }}",
    "{% if false %}{{ n|no_such_filter }}{% endif %}ok",
    "{{ n is no_such_test }}",
    "{{ 'a' 'b' }} {{ \"\"\"\" }}",
    "{% for m in msgs %}{% generation %}{{ m.role }}{% endgeneration %}|{% endfor %}",
    "é{% generation %}ü{% endgeneration %}{% macro g() %}{% generation %}x{% endgeneration %}{% endmacro %}{{ g() }}{% set b %}{% generation %}yy{% endgeneration %}{% endset %}{{ b }}",
    "{% for i in range(3) %}{% if i == 1 %}{% break %}{% endif %}{{ i }}{% endfor %}{% for i in range(3) %}{% if i == 1 %}{% continue %}{% endif %}{{ i }}{% endfor %}",
    "{{ strftime_now('%Y') | length }}",
    "{% for m in msgs %}{% if loop.changed(m.role) %}[{{ m.role }}]{% endif %}{{ loop.depth }}{{ loop.cycle('a', 'b', 'c') }}{% endfor %}",
    "{{ msgs | selectattr('role', 'equalto', 'user') | map(attribute='content') | map('trim') | join(' / ') }} {{ msgs[1:] | length }} {{ (msgs | last).content }}",
    "{%- set ns = namespace(found=false, idx=-1) -%}{%- for m in msgs[::-1] -%}{%- if not ns.found and m.role == 'user' -%}{%- set ns.found = true -%}{%- set ns.idx = msgs|length - 1 - loop.index0 -%}{%- endif -%}{%- endfor -%}{{ ns.idx }}",
    "{{ msgs[0].content.strip().split('.')[0] | lower | replace('be', 'BE') }}",
    "{{ namespace(_x=1) }}",
    "{% set ns = namespace() %}{% set ns._y = 1 %}",
    "{% set n.x = 1 %}",
    "{{ d.items is defined }}{{ d.get('b') }}{{ d.get('zz') }}{{ d.get('zz', 5) }}",
    "{{ 'x'.startswith is callable }}",
]


def text(rng):
    return rng.choice(TEXTS)


def tool_call(rng, i, string_args):
    if rng.random() < 0.5:
        name, args = "get_weather", {"city": rng.choice(["Paris", "東京", "São Paulo"]), "unit": "celsius"}
    else:
        name, args = "search", {"query": rng.choice(["jinja2 lstrip", "天气", "emoji 🎉"]), "max_results": 3, "safe": True, "score": 0.5}
    call = {"id": f"call_{i}", "type": "function", "function": {"name": name, "arguments": json.dumps(args) if string_args else args}}
    return call


def conversations():
    """Fixed-seed conversations covering the shapes templates branch on."""
    rng = random.Random(38)
    convs = []
    for n in range(220):
        msgs = []
        kind = n % 11
        if rng.random() < 0.5:
            msgs.append({"role": "system", "content": rng.choice(["You are a helpful assistant.", "", "Réponds en français. 🇫🇷", "You are Tailor.\nBe brief."])})
        turns = 1 + (n % 5)
        for t in range(turns):
            user = {"role": "user", "content": text(rng)}
            if kind == 3 and rng.random() < 0.6:
                user["content"] = [{"type": "text", "text": text(rng)}] + ([{"type": "text", "text": text(rng)}] if rng.random() < 0.5 else [])
            if kind == 9 and rng.random() < 0.4:
                user["content"] = [{"type": "image"}, {"type": "text", "text": text(rng)}]
            msgs.append(user)
            last_turn = t == turns - 1
            if kind in (4, 5, 6) and rng.random() < 0.7:
                # tool call round
                string_args = kind == 6
                calls = [tool_call(rng, f"{n}_{t}_{k}", string_args) for k in range(1 + (rng.random() < 0.3))]
                assistant = {"role": "assistant", "tool_calls": calls}
                assistant["content"] = rng.choice([None, "", "Let me check."]) if kind != 5 else ""
                if assistant["content"] is None and rng.random() < 0.3:
                    del assistant["content"]
                msgs.append(assistant)
                for c in calls:
                    result = rng.choice(['{"temperature": 21, "sky": "clear"}', "No results.", "结果：晴天 ☀️"])
                    msgs.append({"role": "tool", "tool_call_id": c["id"], "name": c["function"]["name"], "content": result})
            if last_turn and n % 2 == 0:
                break  # ends with the user: the shape add_generation_prompt is for
            assistant = {"role": "assistant", "content": text(rng)}
            if kind == 7:
                assistant["reasoning_content"] = rng.choice(REASONING)
            if kind == 8 and rng.random() < 0.5:
                assistant["content"] = [{"type": "text", "text": text(rng)}]
            msgs.append(assistant)
        if kind == 10 and n % 4 == 2:
            msgs = [m for m in msgs if m["role"] != "system"]
            msgs.insert(1 if len(msgs) > 1 else 0, {"role": "system", "content": "A system message in the middle."})
        conv = {"messages": msgs}
        if kind in (4, 5, 6) or (kind == 2 and n % 3 == 0):
            conv["tools"] = TOOLS
        convs.append(conv)
    # Edge shapes.
    convs.append({"messages": []})
    convs.append({"messages": [{"role": "user", "content": ""}]})
    convs.append({"messages": [{"role": "assistant", "content": "Starts with the assistant."}]})
    convs.append({"messages": [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]})
    convs.append({"messages": [{"role": "system", "content": "Only a system prompt."}]})
    convs.append({"messages": [{"role": "user", "content": "Hi"}, {"role": "unknown_role", "content": "?"}]})
    return convs


def variables_for(case_index):
    v = {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}
    mode = case_index % 3
    if mode == 0:
        v["enable_thinking"] = False
    elif mode == 1:
        v["enable_thinking"] = True
    return v


def main():
    out_path = Path(sys.argv[1])
    conv_file = HERE / "chat_conversations.json"
    convs = json.loads(conv_file.read_text()) if conv_file.exists() else conversations()
    templates = sorted((HERE / "chat_templates").glob("*.jinja"))
    cases = []
    start = time.perf_counter()
    for tpath in templates:
        source = tpath.read_text(encoding="utf-8")
        tracked = re.search(r"\{\%-?\s*generation\s*-?\%\}", source) is not None
        for ci, conv in enumerate(convs):
            for agp in (False, True):
                index = len(cases)
                variables = variables_for(ci)
                case = {"template": tpath.name, "conversation": ci, "add_generation_prompt": agp, "variables": variables}
                try:
                    rendered, spans = render_jinja_template(
                        conversations=[conv["messages"]],
                        tools=conv.get("tools"),
                        chat_template=source,
                        add_generation_prompt=agp,
                        return_assistant_tokens_mask=tracked,
                        **variables,
                    )
                    case["expected"] = rendered[0]
                    case["spans"] = [list(s) for s in spans[0]] if tracked else []
                except Exception as e:  # noqa: BLE001 - every failure is an expected result
                    case["error_type"] = type(e).__name__
                    case["error"] = str(e)
                cases.append(case)
    snippets = []
    for source in SNIPPETS:
        case = {"source": source}
        try:
            tracked = re.search(r"\{\%-?\s*generation\s*-?\%\}", source) is not None
            rendered, spans = render_jinja_template(
                conversations=[SNIPPET_MESSAGES], chat_template=source, return_assistant_tokens_mask=tracked,
                msgs=SNIPPET_MESSAGES, **SNIPPET_VARIABLES,
            )
            case["expected"] = rendered[0]
            case["spans"] = [list(s) for s in spans[0]] if tracked else []
        except Exception as e:  # noqa: BLE001
            case["error_type"] = type(e).__name__
            case["error"] = str(e)
        snippets.append(case)
    elapsed = time.perf_counter() - start
    doc = {
        "transformers": transformers.__version__,
        "jinja2": __import__("jinja2").__version__,
        "python_seconds": elapsed,
        "conversations": convs,
        "templates": [t.name for t in templates],
        "cases": cases,
        "snippet_messages": SNIPPET_MESSAGES,
        "snippet_variables": SNIPPET_VARIABLES,
        "snippets": snippets,
    }
    out_path.write_text(json.dumps(doc, ensure_ascii=False))
    errors = sum(1 for c in cases if "error" in c)
    print(f"{len(templates)} templates, {len(convs)} conversations, {len(cases)} cases ({errors} raise) in {elapsed:.1f}s")


if __name__ == "__main__":
    main()
