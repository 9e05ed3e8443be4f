#!/usr/bin/env python3
"""The docs' generated blocks: figures the main job wrote, never copied by hand.

README.md and docs/*.md hold each generated file verbatim between
    <!-- generated: docs/generated/NAME.md -->  and  <!-- end generated: docs/generated/NAME.md -->
and the README shows one figure the main job draws (FIGURES below).

    scripts/readme_blocks.py --check            # exit 1 if a block differs from its file (ctest readme_generated)
    scripts/readme_blocks.py --compare out      # say which of out/NAME.md (a run's) differ from docs/generated/;
                                                # writes nothing (scripts/run-main.sh runs it after a run)
    scripts/readme_blocks.py --update out       # copy out/NAME.md to docs/generated/ and into the blocks, and
                                                # the figures to docs/figures/: the explicit refresh
"""
import argparse
import filecmp
import glob
import os
import re
import shutil
import sys
import tempfile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
BLOCK = re.compile(r"<!-- generated: (docs/generated/[\w.-]+\.md) -->\n(.*?)<!-- end generated: \1 -->", re.S)
# Figures the docs show, and where the main job draws them (under its results folder).
FIGURES = {"docs/figures/speedup_cdf.png": "figures/speedup_cdf.png"}
# The blocks whose figures are measured on the machine that runs the main job: they differ from
# run to run; the others are simulations, the same on every machine.
MEASURED = {"docs/generated/measured-figures.md"}


def docs():
    """README.md and docs/*.md, relative to the repository root."""
    return ["README.md"] + sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "docs", "*.md")))


def write(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".readme_blocks.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


def blocks():
    """[(doc, generated file, body)] in every doc, in order."""
    out = []
    for doc in docs():
        with open(os.path.join(ROOT, doc)) as f:
            out += [(doc, path, body) for path, body in BLOCK.findall(f.read())]
    return out


def check():
    found = blocks()
    if not found:
        sys.exit("readme_blocks: no generated blocks in README.md or docs/*.md")
    bad = 0
    for doc, path, body in found:
        full = os.path.join(ROOT, path)
        if not os.path.isfile(full):
            print(f"{doc}: block {path}: the file does not exist")
            bad += 1
        elif open(full).read() != body:
            print(f"{doc}: block {path} differs from the file (run scripts/readme_blocks.py --update out "
                  f"after scripts/run-main.sh; never edit the block by hand)")
            bad += 1
    used = {path for _, path, _ in found}
    for full in sorted(glob.glob(os.path.join(ROOT, "docs", "generated", "*.md"))):
        if os.path.relpath(full, ROOT) not in used:
            print(f"{os.path.relpath(full, ROOT)}: no doc shows it (a block <!-- generated: ... --> is missing)")
            bad += 1
    for fig in FIGURES:
        if not os.path.isfile(os.path.join(ROOT, fig)):
            print(f"{fig}: missing (scripts/readme_blocks.py --update out after scripts/run-main.sh)")
            bad += 1
    print(f"readme_blocks: {len(found) - bad} of {len(found)} generated blocks match their files")
    return 1 if bad else 0


def compare(results):
    """What a run wrote against what the docs show; writes nothing."""
    stale = 0
    for path in sorted({p for _, p, _ in blocks()}):
        src = os.path.join(results, os.path.basename(path))
        if not os.path.isfile(src):
            print(f"  {path}: {src} not written by this run")
            continue
        ours, run = open(os.path.join(ROOT, path)).read().splitlines(), open(src).read().splitlines()
        if ours == run:
            print(f"  {path}: the same as this run's")
            continue
        diff = sum(a != b for a, b in zip(ours, run)) + abs(len(ours) - len(run))
        first = next((i for i, (a, b) in enumerate(zip(ours, run)) if a != b), min(len(ours), len(run)))
        if path in MEASURED:
            print(f"  {path}: {diff} lines differ from this run's (measured on this machine: they vary)")
        else:
            stale += 1
            print(f"  {path}: {diff} lines differ from this run's, first line {first + 1}: the docs are not "
                  f"this code's (scripts/readme_blocks.py --update {results} refreshes them)")
    for fig, src in FIGURES.items():
        src = os.path.join(results, src)
        if os.path.isfile(src) and os.path.isfile(os.path.join(ROOT, fig)) and \
                not filecmp.cmp(src, os.path.join(ROOT, fig), shallow=False):
            print(f"  {fig}: differs from this run's {src} (the same figure drawn again, or new results)")
    print(f"readme_blocks: {stale} simulated block(s) differ from this run" if stale else
          "readme_blocks: the simulated blocks are this run's")
    return 0


def update(results):
    found = blocks()
    for path in sorted({p for _, p, _ in found}):
        src = os.path.join(results, os.path.basename(path))
        if not os.path.isfile(src):
            sys.exit(f"readme_blocks: {src}: missing (the main job writes it)")
    for path in sorted({p for _, p, _ in found}):
        os.makedirs(os.path.dirname(os.path.join(ROOT, path)), exist_ok=True)
        write(os.path.join(ROOT, path), open(os.path.join(results, os.path.basename(path))).read())

    def fill(m):
        return (f"<!-- generated: {m.group(1)} -->\n" + open(os.path.join(ROOT, m.group(1))).read() +
                f"<!-- end generated: {m.group(1)} -->")

    for doc in sorted({d for d, _, _ in found}):
        full = os.path.join(ROOT, doc)
        write(full, BLOCK.sub(fill, open(full).read()))
    for fig, src in FIGURES.items():
        src = os.path.join(results, src)
        if os.path.isfile(src):
            os.makedirs(os.path.dirname(os.path.join(ROOT, fig)), exist_ok=True)
            shutil.copyfile(src, os.path.join(ROOT, fig))
        else:
            print(f"readme_blocks: {src}: missing, {fig} kept")
    print(f"readme_blocks: {len(found)} blocks updated from {results}")
    return 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    g = ap.add_mutually_exclusive_group(required=True)
    g.add_argument("--check", action="store_true")
    g.add_argument("--compare", metavar="RESULTS")
    g.add_argument("--update", metavar="RESULTS")
    a = ap.parse_args()
    if a.check:
        return check()
    if a.compare:
        return compare(a.compare)
    return update(a.update)


if __name__ == "__main__":
    sys.exit(main())
