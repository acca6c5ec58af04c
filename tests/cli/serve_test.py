#!/usr/bin/env python3
"""`tailor serve` end to end, with the build's tailor, tailord and tailor-runner:
a tiny chat model served on loopback with a token; /healthz, /v1/models and
the refusals (no token, another Host, a body that is not JSON or too large);
then lm-eval itself (lm_eval_check.py) runs a multiple-choice, a generative
and a rolling log-likelihood task through its local-completions client
against the server and through its hf backend on the same folder, and every
request's result must agree; the generative task again as conversations,
through local-chat-completions and hf with --apply_chat_template, with equal
generations; Ctrl-C stops the server and its model process. Then a client
that leaves a streamed reply mid-generation, and one that leaves an
unstreamed one: the model process stops each generation (it holds after the
first chunk, or at the first token, until told: the failpoints
serve.hold_after_first_chunk and serve.hold_first_unstreamed) and answers
the next request.

  serve_test.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import secrets
import selectors
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request

BUILD, SOURCE = sys.argv[1], sys.argv[2]
PYTHON = os.path.join(SOURCE, ".venv", "bin", "python")
CHECK = os.path.join(SOURCE, "tests", "cli", "lm_eval_check.py")
TAILOR = os.path.join(BUILD, "bin", "tailor")
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def request(url, body=None, token=None, headers=None):
    """(status, body text) of a request; HTTP errors are answers too."""
    req = urllib.request.Request(url, data=body, headers=dict(headers or {}))
    if token:
        req.add_header("Authorization", "Bearer " + token)
    if body is not None:
        req.add_header("Content-Type", "application/json")
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def first_line(proc, timeout):
    """The server's first stdout line ("serving NAME on URL ..."), or None
    when it exits or says nothing in time."""
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    line = b""
    deadline = time.monotonic() + timeout
    while not line.endswith(b"\n"):
        left = deadline - time.monotonic()
        if left <= 0 or not sel.select(left):
            return None
        chunk = os.read(proc.stdout.fileno(), 1)
        if not chunk:
            return None
        line += chunk
    return line.decode().strip()


def runner_pids(model):
    out = subprocess.run(["pgrep", "-f", f"tailor-runner serve {model}"], capture_output=True, text=True)
    return out.stdout.split()


def start_server(model, work, token_file, err_name, env=None):
    """`tailor serve` on a free port in its own session, and its URL (None
    when it does not say where it listens)."""
    server = subprocess.Popen([TAILOR, "serve", model, "--port", "0", "--token-file", token_file,
                               "--max-body-bytes", "65536", "--threads", "2"],
                              stdout=subprocess.PIPE, stderr=open(os.path.join(work, err_name), "w"),
                              start_new_session=True, env=env)
    line = first_line(server, 300)
    check(line is not None and "/v1/completions" in line, f"the server says where it listens: {line}")
    if line is None:
        print(open(os.path.join(work, err_name)).read())
        return server, None
    return server, line.split(" on ", 1)[1].split(" ", 1)[0]


def client_leaves(model, work, token_file, token):
    """An unstreamed completion whose client sends it and closes its
    connection: its generation (held at its first token until then) stops,
    and the model answers the next request. Then a streamed chat reply whose
    client reads its first event and leaves: the generation (held after its
    first chunk until then) stops too, and the next request is answered."""
    env = dict(os.environ, TAILOR_FAILPOINTS="serve.hold_after_first_chunk,serve.hold_first_unstreamed")
    server, url = start_server(model, work, token_file, "leave.err", env)
    try:
        if url is None:
            return
        root = url[: -len("/v1/completions")]
        host, port = root[len("http://"):].split(":")
        body = json.dumps({"prompt": ["Hello", "Once upon a time"], "max_tokens": 200, "temperature": 0}).encode()
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() +
                     b"\r\nAuthorization: Bearer " + token.encode() + b"\r\nContent-Type: application/json"
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        def logged(said):  # the model process's log once it says `said` (120 s at most)
            log, deadline = "", time.monotonic() + 120
            while said not in log and time.monotonic() < deadline:
                log = open(os.path.join(work, "leave.err")).read()
                time.sleep(0.05)
            return log
        # Generating (held at its first token), the client leaves; the model
        # process is told, and says so (the next request is sent after).
        log = logged("held at its first token")
        check("held at its first token" in log, "the unstreamed request reached the model process")
        sock.close()  # without waiting for the reply
        said = "its client left before the reply; generation stopped"
        log = logged(said)
        check(said in log, "the model process says the unstreamed generation stopped: " +
              next((l for l in log.splitlines() if "before the reply" in l), log[-300:]))
        status, text = request(url, json.dumps({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode(),
                               token=token)
        check(status == 200 and json.loads(text)["usage"]["completion_tokens"] == 2,
              f"after an unstreamed request's client left, the next is answered ({status} {text[:200]})")

        body = json.dumps({"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 200,
                           "temperature": 0, "stream": True}).encode()
        sock = socket.create_connection((host, int(port)), timeout=60)
        sock.sendall(b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + f"{host}:{port}".encode() +
                     b"\r\nAuthorization: Bearer " + token.encode() + b"\r\nContent-Type: application/json"
                     b"\r\nContent-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
        seen = b""
        while b"data: " not in seen:
            got = sock.recv(4096)
            if not got:
                break
            seen += got
        sock.close()
        check(b"data: " in seen and b" 200 " in seen.split(b"\r\n", 1)[0],
              f"a streamed reply's first event came ({seen[:120]!r}), and its client left")
        status, text = request(url, json.dumps({"prompt": "Hello", "max_tokens": 2, "temperature": 0}).encode(),
                               token=token)
        check(status == 200 and json.loads(text)["usage"]["completion_tokens"] == 2,
              f"the next request is answered: the left reply's generation stopped ({status} {text[:200]})")
        log = open(os.path.join(work, "leave.err")).read()
        check("its client left after 1 chunks; generation stopped" in log,
              "the model process says it stopped where the client left: " +
              next((l for l in log.splitlines() if "client left" in l), log[-300:]))

    finally:
        os.killpg(server.pid, signal.SIGKILL)
        server.wait()


def main():
    work = tempfile.mkdtemp(prefix="tailor-serve-")
    env = dict(os.environ, **OFFLINE)
    for step in (["model", work], ["tasks", work]):
        subprocess.run([PYTHON, CHECK, *step], check=True, env=env, stdout=subprocess.DEVNULL)
    model = os.path.join(work, "model")
    token = secrets.token_hex(16)
    token_file = os.path.join(work, "token")
    with open(token_file, "w") as f:
        f.write(token + "\n")
    os.chmod(token_file, 0o600)

    # Refused before anything is served: another address without a token,
    # a folder that is no model.
    bad = subprocess.run([TAILOR, "serve", model, "--host", "0.0.0.0"], capture_output=True, text=True)
    check(bad.returncode == 1 and "--token-file" in bad.stderr, "a non-loopback address without a token is refused")
    empty = os.path.join(work, "empty")
    os.makedirs(empty)
    bad = subprocess.run([TAILOR, "serve", empty, "--port", "0"], capture_output=True, text=True)
    check(bad.returncode == 1 and "not a model folder" in bad.stderr, "a folder without a model is refused: " + bad.stderr.strip())

    # Its own session, so that a Ctrl-C reaches the group as a terminal's would.
    server, url = start_server(model, work, token_file, "serve.err")
    try:
        if url is None:
            return 1
        root = url[: -len("/v1/completions")]

        status, text = request(root + "/healthz")
        check(status == 200 and text.strip() == "ok", "GET /healthz needs no token")
        status, text = request(url, b'{"prompt": "hi", "max_tokens": 1}')
        check(status == 401 and json.loads(text)["error"]["type"] == "authentication_error", "no token: 401")
        status, text = request(root + "/v1/models", token=token)
        models = json.loads(text)
        check(status == 200 and models["data"][0]["max_model_len"] == 256, "GET /v1/models names the context")
        status, text = request(url, b'{"prompt": ', token=token)
        check(status == 400 and "not JSON" in json.loads(text)["error"]["message"], "a body that is not JSON: 400")
        status, _ = request(url, b'{"prompt": "' + b"x" * 100_000 + b'"}', token=token)
        check(status == 413, f"a body over --max-body-bytes: 413 (got {status})")
        status, _ = request(url, b'{"prompt": "hi"}', token=token, headers={"Host": "attacker.example"})
        check(status == 403, "another Host: 403")
        status, text = request(url, json.dumps({"prompt": "Hello", "max_tokens": 4, "temperature": 0}).encode(),
                               token=token)
        check(status == 200 and json.loads(text)["usage"]["completion_tokens"] == 4, "a completion: 200")
        chat_url = root + "/v1/chat/completions"
        status, text = request(chat_url, json.dumps({"messages": [{"role": "user", "content": "Hello"}],
                                                     "max_tokens": 4, "temperature": 0}).encode(), token=token)
        reply = json.loads(text)
        check(status == 200 and reply["object"] == "chat.completion" and reply["usage"]["completion_tokens"] == 4
              and reply["choices"][0]["message"]["role"] == "assistant", f"a chat completion: 200 ({text[:200]})")
        # Streamed: server-sent events as OpenAI sends them, the same text
        # and the same tokens' log-probabilities.
        asked = {"messages": [{"role": "user", "content": "Hello"}], "max_tokens": 12, "temperature": 0,
                 "logprobs": True, "top_logprobs": 2}
        _, whole = request(chat_url, json.dumps(asked).encode(), token=token)
        status, text = request(chat_url, json.dumps(dict(asked, stream=True, stream_options={"include_usage": True})
                                                    ).encode(), token=token)
        events = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
        chunks = [json.loads(e) for e in events[:-1]]
        streamed = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        streamed_tokens = [e["token"] for c in chunks if c["choices"] and c["choices"][0]["logprobs"]
                           for e in c["choices"][0]["logprobs"]["content"]]
        whole = json.loads(whole)
        check(status == 200 and events[-1] == "[DONE]" and chunks[0]["choices"][0]["delta"]["role"] == "assistant"
              and streamed == whole["choices"][0]["message"]["content"]
              and streamed_tokens == [e["token"] for e in whole["choices"][0]["logprobs"]["content"]]
              and all(len(e["top_logprobs"]) == 2 for e in whole["choices"][0]["logprobs"]["content"])
              and chunks[-1]["usage"]["completion_tokens"] == whole["usage"]["completion_tokens"],
              f"a streamed chat completion with logprobs: {len(chunks)} chunks, the same text and tokens, then "
              f"[DONE] ({text[-300:]!r})")
        # Completions streamed the same way: text_completion chunks, each
        # choice's text and tokens (logprobs) as asked without stream.
        asked = {"prompt": ["Hello", "Once upon"], "max_tokens": 8, "temperature": 0, "echo": True, "logprobs": 1}
        _, whole = request(url, json.dumps(asked).encode(), token=token)
        status, text = request(url, json.dumps(dict(asked, stream=True)).encode(), token=token)
        events = [line[len("data: "):] for line in text.split("\n\n") if line.startswith("data: ")]
        pieces, tokens = {}, {}
        for e in events[:-1]:
            c = json.loads(e)["choices"][0]
            pieces[c["index"]] = pieces.get(c["index"], "") + c["text"]
            tokens[c["index"]] = tokens.get(c["index"], []) + c["logprobs"]["tokens"]
        whole = json.loads(whole)["choices"]
        check(status == 200 and events[-1] == "[DONE]"
              and [pieces.get(i) for i in range(2)] == [c["text"] for c in whole]
              and [tokens.get(i) for i in range(2)] == [c["logprobs"]["tokens"] for c in whole],
              f"a streamed completion of two prompts with logprobs: {len(events) - 1} chunks, each choice's text "
              f"and tokens ({text[-300:]!r})")
        status, text = request(chat_url, json.dumps({"messages": [{"role": "user", "content": "x" * 2000}],
                                                     "stream": True}).encode(), token=token)
        check(status == 400 and "no room" in json.loads(text)["error"]["message"],
              "a streamed request refused before its first chunk is an ordinary 400")
        status, text = request(root + "/v1/embeddings", b"{}", token=token)
        check(status == 404 and "/v1/chat/completions" in json.loads(text)["error"]["message"],
              "another route: 404 naming those served")

        # Both comparisons in one process: lm-eval and torch imported once.
        started = time.monotonic()
        compare = subprocess.run([PYTHON, CHECK, "compare", work, model, url, chat_url], capture_output=True,
                                 text=True, env=dict(env, OPENAI_API_KEY=token))
        print(compare.stdout.strip())
        # The summary is the last thing printed (lm-eval prints lines of its own before it).
        try:
            summary = json.loads(compare.stdout[("\n" + compare.stdout).rfind("\n{\n"):])
        except ValueError:
            summary = {}
        failure = "" if compare.returncode == 0 else ":\n" + compare.stderr[-4000:]
        took = f"({time.monotonic() - started:.0f} s for both)"
        check(summary.get("completions", {}).get("ok") is True,
              f"lm-eval through tailor serve equals lm-eval's hf backend {took}" + failure)
        check(summary.get("chat", {}).get("ok") is True,
              f"lm-eval's local-chat-completions through tailor serve equals its hf backend with the chat template "
              f"{took}" + failure)

        pids = runner_pids(model)
        check(len(pids) == 1, f"one model process serves: {pids}")
        os.killpg(server.pid, signal.SIGINT)
        rc = server.wait(timeout=60)
        check(rc == 0, f"Ctrl-C stops the server with exit 0 (got {rc})")
        gone = all(not os.path.exists(f"/proc/{p}") or open(f"/proc/{p}/stat").read().split()[2] == "Z"
                   for p in pids)
        check(gone, "the model process ended with it")
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
    client_leaves(model, work, token_file, token)
    print(f"serve_test: {'FAILED: ' + '; '.join(failures) if failures else 'ok'}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
