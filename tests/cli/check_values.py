#!/usr/bin/env python3
"""Checks a command's output against hand-derived values, independently of its golden file.

usage: check_values.py CHECKFILE < output

A check file (tests/cli/expected/NAME.check, beside NAME.txt) has lines of
  name = /REGEX/            the first number group of REGEX's first match (multiline) bound to name
  names = all /REGEX/       every match's first group (its whitespace-separated numbers), one list
  assert EXPRESSION         a Python expression over the names that must be true
and '#' comments, where the arithmetic that gave each expected value is written
out. Helpers: near(a, b, rel=1e-4), the size units KiB, MiB, GiB, re and the
output itself as `text`. A name whose
regex does not match fails. So a golden regenerated with UPDATE=1 still has to
contain these values: a wrong number cannot be blessed by regenerating.
"""
import math
import re
import sys


def near(a, b, rel=1e-4):
    return abs(a - b) <= rel * max(abs(a), abs(b))


def number(s):
    m = re.fullmatch(r"([-+0-9.eE]+)(B|KiB|MiB|GiB)?", s)
    if not m:
        raise ValueError(f"not a number: {s!r}")
    return float(m.group(1)) * {None: 1, "B": 1, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}[m.group(2)]


def main():
    path = sys.argv[1]
    text = sys.stdin.read()
    env = {"near": near, "math": math, "re": re, "text": text, "KiB": 2**10, "MiB": 2**20, "GiB": 2**30}
    fails = 0
    for n, line in enumerate(open(path), 1):
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        where = f"{path}:{n}"
        m = re.fullmatch(r"(\w+)\s*=\s*(all\s+)?/(.*)/", line)
        if m:
            rx = re.compile(m.group(3), re.M)
            if m.group(2):
                env[m.group(1)] = [number(v) for x in rx.finditer(text) for v in x.group(1).split()]
                if not env[m.group(1)]:
                    print(f"{where}: no line matches /{m.group(3)}/")
                    fails += 1
                continue
            found = rx.search(text)
            if not found:
                print(f"{where}: no line matches /{m.group(3)}/")
                fails += 1
                env[m.group(1)] = float("nan")
            else:
                env[m.group(1)] = number(found.group(1))
            continue
        if line.startswith("assert "):
            expr = line[len("assert "):].split("  #")[0]
            try:
                ok = eval(expr, env)
            except Exception as e:  # a name that did not match, a typo
                ok, expr = False, f"{expr} ({e})"
            if not ok:
                names = {k: v for k, v in env.items() if re.search(rf"\b{k}\b", expr) and not callable(v) and k not in ("math", "re", "text")}
                print(f"{where}: false: {expr}  with {names}")
                fails += 1
            continue
        print(f"{where}: cannot read this line")
        fails += 1
    sys.exit(1 if fails else 0)


if __name__ == "__main__":
    main()
