#!/usr/bin/env python3
"""The README's sample outputs and example specs, checked against the real thing.

usage: tests/readme_test.py BUILD_DIR [README.md]

A fenced block in the README is checked when the line before it (blank lines
aside) is one of these markers:

  <!-- readme-test -->            a console block: each line starting with "$ "
                                  is a command, run by bash in the repository
                                  root with BUILD_DIR/bin first on PATH (so
                                  "tailor" is the built one), stdout and
                                  stderr together; the lines after it, up to
                                  the next "$ " line, are its expected output,
                                  and it must exit 0
  <!-- readme-test: exit N -->    the same, each command must exit N
  <!-- readme-test: file PATH --> the block is the file PATH of the repository
  <!-- readme-test: demo -->      every "== " heading of the block is one of
                                  scripts/demo's steps, in the demo's order

Expected text may elide, and nothing else is normalised (trailing spaces are
ignored): a line that is only "..." matches any number of lines, zero
included, and "..." inside a line matches any text on that line (a machine's
RAM, a temporary folder). Exit 0 when every marked block matches; otherwise
each stale block is printed with what the command printed instead.

The walkthrough's validate block shows the error of a model not downloaded
yet: it expects no models/qwen2.5-0.5b in this checkout.
"""
import functools
import os
import pathlib
import re
import subprocess
import sys

MARKER = re.compile(r"^<!--\s*readme-test(?::\s*(.*?))?\s*-->\s*$")


def blocks(readme_lines):
    """(line number of the fence, marker argument, block lines) per marked block."""
    out = []
    marker = None
    i = 0
    while i < len(readme_lines):
        line = readme_lines[i]
        m = MARKER.match(line)
        if m:
            marker = (i + 1, m.group(1) or "")
        elif line.startswith("```"):
            fence_line = i + 1
            j = i + 1
            while j < len(readme_lines) and not readme_lines[j].startswith("```"):
                j += 1
            if marker is not None:
                out.append((fence_line, marker[1], readme_lines[i + 1 : j]))
            marker = None
            i = j
        elif line.strip() and marker is not None:
            raise SystemExit(f"README.md:{marker[0]}: a readme-test marker must be followed by a fenced block")
        i += 1
    return out


def line_pattern(expected):
    return re.compile("^" + ".*".join(re.escape(p) for p in expected.rstrip().split("...")) + "$")


def matches(expected, actual):
    """Whether actual lines match expected lines, "..." lines matching any run."""
    exp = [e.rstrip() for e in expected]
    act = [a.rstrip() for a in actual]
    pats = [None if e == "..." else line_pattern(e) for e in exp]

    @functools.lru_cache(maxsize=None)
    def match(i, j):
        if i == len(exp):
            return j == len(act)
        if pats[i] is None:
            return any(match(i + 1, k) for k in range(j, len(act) + 1))
        return j < len(act) and pats[i].match(act[j]) is not None and match(i + 1, j + 1)

    sys.setrecursionlimit(max(1000, 4 * (len(exp) + len(act)) + 100))
    return match(0, 0)


def commands(block):
    """(command, expected output lines) for each "$ " line of a console block."""
    out = []
    for line in block:
        if line.startswith("$ "):
            out.append((line[2:], []))
        elif out:
            out[-1][1].append(line)
        else:
            raise ValueError(f"output before the first command: {line!r}")
    return out


def check_console(root, build, block, want_exit):
    env = {k: v for k, v in os.environ.items() if not k.startswith("TAILOR_")}
    env["PATH"] = str(build / "bin") + os.pathsep + env.get("PATH", "")
    problems = []
    for command, expected in commands(block):
        run = subprocess.run(["bash", "-c", command], cwd=root, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, timeout=120)
        actual = run.stdout.splitlines()
        if run.returncode != want_exit:
            problems.append(f"$ {command}: exit {run.returncode}, expected {want_exit}\n" + run.stdout)
        elif not matches(expected, actual):
            problems.append(f"$ {command}: the output differs\n--- README\n" + "\n".join(expected) +
                            "\n--- actual\n" + run.stdout)
    return problems


def check_file(root, block, path):
    actual = (root / path).read_text().splitlines()
    if matches(block, actual):
        return []
    return [f"differs from {path}\n--- README\n" + "\n".join(block) + "\n--- file\n" + "\n".join(actual)]


def check_demo(root, block):
    steps = [re.sub(r"\$[a-z]+", "...", m.group(1))
             for m in re.finditer(r'^step "(.*)"$', (root / "scripts/demo").read_text(), re.M)]
    problems = []
    k = 0
    for heading in (line[3:] for line in block if line.startswith("== ")):
        while k < len(steps) and not line_pattern(steps[k]).match(heading):
            k += 1
        if k == len(steps):
            problems.append(f"'== {heading}' is not one of scripts/demo's steps (in order)")
            break
        k += 1
    return problems


def main():
    if len(sys.argv) not in (2, 3):
        raise SystemExit(__doc__)
    build = pathlib.Path(sys.argv[1]).resolve()
    root = pathlib.Path(__file__).resolve().parent.parent
    readme = pathlib.Path(sys.argv[2]) if len(sys.argv) == 3 else root / "README.md"
    found = blocks(readme.read_text().splitlines())
    if not found:
        raise SystemExit(f"{readme}: no readme-test blocks found")
    failed = 0
    for fence_line, arg, block in found:
        if arg == "":
            problems = check_console(root, build, block, 0)
        elif arg.startswith("exit "):
            problems = check_console(root, build, block, int(arg.split()[1]))
        elif arg.startswith("file "):
            problems = check_file(root, block, arg.split(None, 1)[1])
        elif arg == "demo":
            problems = check_demo(root, block)
        else:
            problems = [f"unknown marker argument {arg!r}"]
        for p in problems:
            print(f"{readme}:{fence_line}: stale block: {p}\n")
        failed += bool(problems)
    print(f"readme: {len(found) - failed} of {len(found)} marked blocks match")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
