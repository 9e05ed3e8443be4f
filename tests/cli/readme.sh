#!/usr/bin/env bash
# Every command README.md shows is run and its output checked for the file names,
# columns and keys the README names (tests/cli/readme_commands.py; GPU commands
# skipped without a GPU). A few minutes on 2 cores (the two paper-grid sweeps and
# the ablation sweep take most of it).
set -u
exec python3 "$2/tests/cli/readme_commands.py" "$1" "$2"
