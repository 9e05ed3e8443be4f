# Refusal checks for the hardening scripts, sourced after the script has set
# $tmp, $bin and the ok/bad counters (and `cases`): snap fingerprints $tmp, and
# check_refusal runs a command that must be refused without touching it.

# Fingerprint of the folder: every entry with its type, link target and content hash.
snap() { (cd "$tmp" && find . -mindepth 1 \( -path ./snap -o -path ./log \) -prune -o -printf '%p %y %l\n' | sort &&
  find . -type f ! -name log -print0 | sort -z | xargs -0 -r sha256sum) ; }

# check_refusal RC NAME "FRAGMENT..." -- COMMAND...: exit RC, the message (one
# line for RC 1; its first line for CLI11's option checks, RC 105) holds every
# fragment, and the folder is exactly as before.
check_refusal() {
  local want=$1 name=$2
  shift 2
  local frags=()
  while [ "$1" != "--" ]; do frags+=("$1"); shift; done
  shift
  cases=$((cases + 1))
  local before after out rc msg
  before=$(snap)
  out=$(timeout 60 "$@" 2>&1 < /dev/null)
  rc=$?
  after=$(snap)
  if [ $rc != "$want" ]; then bad "$name: exit $rc (expected $want): $out"; return; fi
  msg=$out
  if [ "$want" = 1 ]; then
    if [ "$(printf '%s\n' "$out" | wc -l)" != 1 ]; then bad "$name: not one line: $out"; return; fi
  else
    msg=$(printf '%s\n' "$out" | head -1)
  fi
  for f in "${frags[@]}"; do
    if [[ $msg != *"$f"* ]]; then bad "$name: message lacks '$f': $out"; return; fi
  done
  if [ "$before" != "$after" ]; then bad "$name: files changed: $(diff <(echo "$before") <(echo "$after"))"; return; fi
  ok
}
# refused: a checked error (exit 1, one line). rejected: an option check (CLI11, exit 105).
refused() { check_refusal 1 "$@"; }
