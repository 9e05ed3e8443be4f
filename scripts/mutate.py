#!/usr/bin/env python3
"""A small, deterministic source mutator for scripts/mutation.sh.

`mutate.py list FILE...` prints every candidate mutant as a JSON line
{"id", "file", "line", "op", "old", "new"}; `mutate.py apply SRC_ROOT JSON`
writes one mutant into the tree at SRC_ROOT (the caller restores the file).

Mutation operators, applied to one line at a time (comments, string literals,
preprocessor lines and lines that build error messages are left alone):
  aor      arithmetic operator swap:  a + b <-> a - b, a * b <-> a / b
  asg      compound assignment swap:  += <-> -=, *= <-> /=
  ror      comparison flip:  < <-> <=, > <-> >=, == <-> !=
  lcr      logical connector swap:  && <-> ||
  crp      constant change: an integer literal n -> n + 1 and n - 1, a
           floating literal x -> 2x
  sdl      statement deletion: an assignment or a call statement -> ;
  rvr      return-value change: return true <-> return false, return x ->
           return x + 1 for an arithmetic-looking x (compile errors counted)
Operators are only matched with a space on each side (the code is
clang-formatted), so unary minus, pointers, templates and ++ are not touched.
"""
import json
import re
import sys

SKIP_LINE = re.compile(r'^\s*(#|//|\*|/\*)|throw |Error\(|fmt::format|fmt::print|static_assert|"')

BINARY = [
    ("aor", " + ", [" - "]), ("aor", " - ", [" + "]), ("aor", " * ", [" / "]), ("aor", " / ", [" * "]),
    ("asg", " += ", [" -= "]), ("asg", " -= ", [" += "]), ("asg", " *= ", [" /= "]), ("asg", " /= ", [" *= "]),
    ("ror", " < ", [" <= "]), ("ror", " <= ", [" < "]), ("ror", " > ", [" >= "]), ("ror", " >= ", [" > "]),
    ("ror", " == ", [" != "]), ("ror", " != ", [" == "]),
    ("lcr", " && ", [" || "]), ("lcr", " || ", [" && "]),
]
NUMBER = re.compile(r'(?<![\w.])(\d+\.\d*(?:[eE][-+]?\d+)?|\d+[eE][-+]?\d+|\d+)(?![\w.])')
STATEMENT = re.compile(
    r'^(\s*)((?:[a-z_][\w]*(?:\.|->|\[[^\]]*\]))*[a-z_][\w]*(?:\[[^\]]*\])?\s*(?:[-+*/]?=)\s.*;'  # x = ...; x.y += ...;
    r'|(?:[a-z_][\w]*(?:\.|->))+[a-z_]\w*\(.*\);)\s*$'  # v.push_back(...);
)
RETURN = re.compile(r'^(\s*return )(.+);\s*$')


def strip_comment(line):
    i = line.find("//")
    return (line, "") if i < 0 else (line[:i], line[i:])


def candidates(path):
    out = []
    in_block = False
    with open(path) as f:
        lines = f.read().split("\n")
    for n, line in enumerate(lines, 1):
        s = line.strip()
        if in_block:
            if "*/" in s:
                in_block = False
            continue
        if s.startswith("/*"):
            in_block = "*/" not in s
            continue
        if not s or SKIP_LINE.search(line):
            continue
        code, comment = strip_comment(line)
        muts = []
        # A ' < ' or ' > ' inside a template argument list is not a comparison; the
        # clang-formatted code writes those without spaces, so all matches are kept.
        for op, old, news in BINARY:
            start = 0
            while True:
                i = code.find(old, start)
                if i < 0:
                    break
                # ' < ' must not be part of ' << ', ' <= ' of ' <<= ' etc.: the
                # characters around the match are spaces by construction.
                for new in news:
                    muts.append((op, code[:i] + new + code[i + len(old):]))
                start = i + 1
        for m in NUMBER.finditer(code):
            lit = m.group(1)
            # array sizes, bit shifts and loop starts at 0 compile-fail or are
            # index arithmetic; keep every literal but 0 in the integer rule.
            if re.fullmatch(r"\d+", lit):
                v = int(lit)
                repl = [str(v + 1)] + ([str(v - 1)] if v > 0 else [])
            else:
                repl = ["(2 * " + lit + ")"]
            for r in repl:
                muts.append(("crp", code[:m.start(1)] + r + code[m.end(1):]))
        st = STATEMENT.match(code)
        if st and not re.match(r"^\s*(return|const|auto|if|for|while|else|case|using)\b", code):
            muts.append(("sdl", st.group(1) + ";  // deleted"))
        rt = RETURN.match(code)
        if rt:
            val = rt.group(2).strip()
            if val == "true":
                muts.append(("rvr", rt.group(1) + "false;"))
            elif val == "false":
                muts.append(("rvr", rt.group(1) + "true;"))
            elif re.search(r"[-+*/]|\b(std::)?(max|min|ceil|sqrt|pow)\b|\d", val) and "{" not in val:
                muts.append(("rvr", rt.group(1) + "(" + val + ") + 1;"))
        for op, new in muts:
            out.append({"file": path, "line": n, "op": op, "old": line, "new": new + comment})
    return out


def main():
    if sys.argv[1] == "list":
        k = 0
        for p in sys.argv[2:]:
            for c in candidates(p):
                c["id"] = k
                k += 1
                print(json.dumps(c))
    elif sys.argv[1] == "apply":
        root, m = sys.argv[2], json.loads(sys.argv[3])
        path = root + "/" + m["file"]
        with open(path) as f:
            lines = f.read().split("\n")
        n = m["line"] - 1
        if n >= len(lines) or lines[n] != m["old"]:  # the file moved on: find the line by its text
            hits = [i for i, l in enumerate(lines) if l == m["old"]]
            if len(hits) != 1:
                sys.exit(f"mutate.py: {path}: line {m['line']} is not {m['old']!r} ({len(hits)} such lines)")
            n = hits[0]
        lines[n] = m["new"]
        with open(path, "w") as f:
            f.write("\n".join(lines))
    else:
        sys.exit("usage: mutate.py list FILE... | apply ROOT JSON")


if __name__ == "__main__":
    main()
