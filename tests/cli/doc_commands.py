#!/usr/bin/env python3
"""Runs the commands a document shows and checks the output it shows.

usage: doc_commands.py BUILD/parmsim REPO_ROOT DOC.md...

Every line of a ```sh block (comments and blank lines aside) is run with bash
in a scratch folder that holds the repository's input folders (examples,
topologies, tests, validation, experiments, docs) and build/parmsim as the
binary under test, so `out/...` paths land in the scratch folder and print as
the document prints them. Each must exit 0. A ```text block that is the next
block after a ```sh block shows that block's output: each of its lines without
"..." must be a line of the output (trailing spaces aside). Other ```text
blocks (error messages, excerpts of other runs) are not checked here.
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

BIN, ROOT, DOCS = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2]), sys.argv[3:]


def blocks(text):
    """(kind, lines) of every fenced block, in order."""
    out, kind, cur = [], None, []
    for line in text.split("\n"):
        m = re.match(r"^```(\w*)\s*$", line)
        if m and kind is None:
            kind, cur = m.group(1) or "plain", []
        elif line.startswith("```") and kind is not None:
            out.append((kind, cur))
            kind = None
        elif kind is not None:
            cur.append(line)
    return out


def main():
    failures = commands = checked = 0
    work = tempfile.mkdtemp(prefix="doc_commands.")
    try:
        for d in ("examples", "topologies", "tests", "validation", "experiments", "docs"):
            os.symlink(os.path.join(ROOT, d), os.path.join(work, d))
        os.mkdir(os.path.join(work, "build"))
        os.symlink(BIN, os.path.join(work, "build", "parmsim"))
        for doc in DOCS:
            last_output = None
            for kind, lines in blocks(open(os.path.join(ROOT, doc)).read()):
                if kind == "sh":
                    last_output = ""
                    for cmd in lines:
                        if not cmd.strip() or cmd.strip().startswith("#"):
                            continue
                        commands += 1
                        p = subprocess.run(["bash", "-c", cmd], cwd=work, capture_output=True, text=True, timeout=600)
                        last_output += p.stdout + p.stderr
                        if p.returncode != 0:
                            failures += 1
                            print(f"FAIL {doc}: exit {p.returncode}: {cmd}\n{p.stdout}{p.stderr}")
                    continue
                if kind == "text" and last_output is not None:
                    got = {l.rstrip() for l in last_output.split("\n")}
                    for l in lines:
                        if "..." in l or not l.strip():
                            continue
                        checked += 1
                        if l.rstrip() not in got:
                            failures += 1
                            print(f"FAIL {doc}: the output lacks the line shown:\n  {l}\noutput:\n{last_output}")
                last_output = None
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"doc_commands: {commands} commands run, {checked} output lines checked, {failures} failures")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
