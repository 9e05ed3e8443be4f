# The start of a whole-command test script, sourced with the script's own
# arguments (PARMSIM SOURCE_DIR): the program's absolute path in $bin, the
# source directory as the working directory, a temporary directory $tmp removed
# at exit, and the pass/fail counters with ok and bad.
bin=$(realpath "$1")
cd "$2" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passes=0 fails=0
ok() { passes=$((passes + 1)); }
bad() { fails=$((fails + 1)); echo "FAIL $*"; }
