#!/usr/bin/env python3
"""Runs the tests' Python reference scripts in forks of one interpreter that
imported the heavy libraries once (tests/testing/python_scripts.h starts it).

A reference script is short; importing torch, transformers and PEFT is not
(about 6.5 s of CPU on the 2-core machines, TRL 2 s more), and a test binary
ran up to ten such scripts, each paying it again. This server imports the
modules named on its command line once, then for each request forks a child
that runs the script as `python SCRIPT ARGS...` would: as __main__, with its
own sys.argv and sys.path[0], stdout and stderr in the request's log, the
interpreter's exit handlers run at its end. The server itself never runs a
torch operation, so no OpenMP or intra-op thread exists when it forks, and
each child starts from the same state: nothing one script does reaches the
next.

The reference scripts run offline on the CPU; the environment they set for
themselves before importing torch is set here, before the imports, since
the libraries read it when they load.

Protocol, one line each way:
  request (stdin):  JSON {"script": PATH, "args": STRING, "log": PATH}; ARGS
                    are split into words as the shell splits them
  answer (stdout):  the script's exit status (negative: the signal that ended it)
The server ends at the end of its input.

  python_forkserver.py MODULE...
"""
import atexit
import importlib
import json
import os
import runpy
import shlex
import sys
import traceback

for name, value in (("CUDA_VISIBLE_DEVICES", ""), ("HF_HUB_OFFLINE", "1"), ("HF_HUB_DISABLE_TELEMETRY", "1"),
                    ("HF_DATASETS_OFFLINE", "1"), ("TOKENIZERS_PARALLELISM", "false"),
                    ("HF_HUB_DISABLE_PROGRESS_BARS", "1")):
    os.environ.setdefault(name, value)


def exit_status(code):
    """What the interpreter would exit with for SystemExit(code)."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def run_child(request):
    """In the fork: the script as __main__; never returns."""
    status = 1
    try:
        fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        os.close(fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        script = os.path.abspath(request["script"])
        sys.argv = [script] + shlex.split(request.get("args", ""))
        sys.path[0] = os.path.dirname(script)
        runpy.run_path(script, run_name="__main__")
        status = 0
    except SystemExit as e:
        status = exit_status(e.code)
    except BaseException:  # the script's own failure, reported as python would
        traceback.print_exc()
        status = 1
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(status & 0xFF if status >= 0 else 1)


def main():
    for name in sys.argv[1:]:
        importlib.import_module(name)
    answers = sys.stdout
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        answers.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            run_child(request)
        _, status = os.waitpid(pid, 0)
        answers.write(f"{os.waitstatus_to_exitcode(status)}\n")
        answers.flush()
    return 0


if __name__ == "__main__":
    sys.exit(main())
