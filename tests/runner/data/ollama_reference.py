"""The other side of ollama_template_test.cpp: each Ollama template Tailor
derived, rendered by Go's text/template as Ollama renders it
(ollama_render.go, built with the Go of the project's .venv), beside the
chat template it came from rendered by jinja2 as transformers renders it.

    python ollama_reference.py CASES.json OUT.json

CASES.json: [{"name", "source" (the chat template), "variables", "bos",
"add_bos", "go" (the Ollama template), "conversations": [{"messages",
"continued"}]}]. A conversation that is not continued is rendered with the
generation prompt; a continued one ends on an assistant turn that Ollama
leaves open, so jinja2's rendering is cut after that turn's text. Where
llama.cpp writes BOS (add_bos), jinja2's leading BOS is left out.
OUT.json: {"results": [{"name", "conversation", "jinja", "go", "error"}]}.
"""

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from transformers.utils.chat_template_utils import render_jinja_template

HERE = Path(__file__).resolve().parent


def go_env(work):
    """No network and no toolchain switch: the Go of .venv, a cache of its own."""
    env = dict(os.environ)
    env.update({"GOTOOLCHAIN": "local", "GOPROXY": "off", "GOTELEMETRY": "off",
                "GO111MODULE": "on", "GOPATH": str(Path(work) / "gopath"),
                "GOCACHE": os.environ.get("TAILOR_GOCACHE", str(Path(tempfile.gettempdir()) / "tailor-go-cache"))})
    return env


_BUILT = {}


def build_renderer(work):
    """ollama_render.go built once a process (into the first `work`, which
    must outlive its uses); the path of the program."""
    if "path" not in _BUILT:
        go = Path(sys.executable).parent / "go"
        out = Path(work) / "ollama_render"
        subprocess.run([str(go), "build", "-o", str(out), str(HERE / "ollama_render.go")], check=True, cwd=work,
                       env=go_env(work))
        _BUILT["path"] = out
    return _BUILT["path"]


def jinja(case, conversation):
    messages = conversation["messages"]
    continued = conversation["continued"]
    rendered, _ = render_jinja_template(conversations=[messages], chat_template=case["source"],
                                        add_generation_prompt=not continued, **case["variables"])
    text = rendered[0]
    if continued:
        last = messages[-1]["content"]
        text = text[:text.rindex(last) + len(last)]
    if case["add_bos"] and case["bos"] and text.startswith(case["bos"]):
        text = text[len(case["bos"]):]
    return text


def main():
    cases_path, out_path = sys.argv[1], sys.argv[2]
    cases = json.loads(Path(cases_path).read_text(encoding="utf-8"))
    with tempfile.TemporaryDirectory(prefix="tailor-ollama-") as work:
        renderer = build_renderer(work)
        results, batch = [], []
        for case in cases:
            for ci, conversation in enumerate(case["conversations"]):
                r = {"name": case["name"], "conversation": ci}
                try:
                    r["jinja"] = jinja(case, conversation)
                except Exception as e:  # noqa: BLE001 - a template that raises is reported, not compared
                    r["error"] = f"jinja2: {type(e).__name__}: {e}"
                results.append(r)
                batch.append({"template": case["go"], "messages": conversation["messages"]})
        done = subprocess.run([str(renderer), "render"], input=json.dumps(batch), capture_output=True, text=True,
                              check=True, env=go_env(work))
        for r, g in zip(results, json.loads(done.stdout)["results"]):
            r["go"] = g["text"]
            if g.get("error"):
                r["error"] = (r.get("error", "") + " go: " + g["error"]).strip()
    Path(out_path).write_text(json.dumps({"results": results}), encoding="utf-8")


if __name__ == "__main__":
    main()
