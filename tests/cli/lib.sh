# The start of a whole-command test script, sourced with the script's own
# arguments (PARMSIM SOURCE_DIR): the program's absolute path in $bin, the
# source directory as the working directory, a temporary directory $tmp removed
# at exit, the pass/fail counters with ok and bad, and refused: a command that must
# fail with one line of stderr holding the text given, and print nothing.
bin=$(realpath "$1")
cd "$2" || exit 2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passes=0 fails=0
ok() { passes=$((passes + 1)); }
bad() { fails=$((fails + 1)); echo "FAIL $*"; }
refused() {  # expected text, then the command's arguments (stdout to $tmp/out, stderr to $tmp/err)
  local want=$1
  shift
  "$bin" "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ "$rc" -ne 0 ] && [ ! -s "$tmp/out" ] && [ "$(wc -l < "$tmp/err")" -eq 1 ] && grep -qF -- "$want" "$tmp/err"; then
    ok
  else
    bad "refusal '$want' (exit $rc): $(cat "$tmp/err")"
  fi
}
