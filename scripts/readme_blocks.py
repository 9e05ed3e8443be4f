#!/usr/bin/env python3
"""The README's generated blocks: figures the main job wrote, never copied by hand.

README.md holds each generated file verbatim between
    <!-- generated: docs/generated/NAME.md -->  and  <!-- end generated: docs/generated/NAME.md -->

    scripts/readme_blocks.py --check            # exit 1 if a block differs from its file (ctest readme_generated)
    scripts/readme_blocks.py --update out       # copy out/NAME.md to docs/generated/ and into the README
                                                # (scripts/run-main.sh does this after a run)
"""
import argparse
import os
import re
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"<!-- generated: (docs/generated/[\w.-]+\.md) -->\n(.*?)<!-- end generated: \1 -->", re.S)


def write(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".readme_blocks.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true")
    g.add_argument("--update", metavar="RESULTS")
    ap.add_argument("--readme", default=os.path.join(ROOT, "README.md"))
    a = ap.parse_args()
    readme = open(a.readme).read()
    blocks = BLOCK.findall(readme)
    if not blocks:
        sys.exit(f"{a.readme}: no generated blocks")
    if a.check:
        bad = 0
        for path, body in blocks:
            full = os.path.join(ROOT, path)
            if not os.path.isfile(full):
                print(f"{a.readme}: block {path}: the file does not exist")
                bad += 1
            elif open(full).read() != body:
                print(f"{a.readme}: block {path} differs from the file (run scripts/readme_blocks.py --update out "
                      f"after scripts/run-main.sh; never edit the block by hand)")
                bad += 1
        print(f"readme_blocks: {len(blocks) - bad} of {len(blocks)} generated blocks match their files")
        sys.exit(1 if bad else 0)
    for path, _ in blocks:
        src = os.path.join(a.update, os.path.basename(path))
        if not os.path.isfile(src):
            sys.exit(f"readme_blocks: {src}: missing (the main job writes it)")
        os.makedirs(os.path.dirname(os.path.join(ROOT, path)), exist_ok=True)
        write(os.path.join(ROOT, path), open(src).read())

    def fill(m):
        return (f"<!-- generated: {m.group(1)} -->\n" + open(os.path.join(ROOT, m.group(1))).read() +
                f"<!-- end generated: {m.group(1)} -->")

    write(a.readme, BLOCK.sub(fill, readme))
    print(f"readme_blocks: {len(blocks)} blocks updated from {a.update}")


if __name__ == "__main__":
    main()
