#!/usr/bin/env bash
# backend/trace-summary.sh TRACE.csv: one line for a measured (or simulated)
# trace: the layer time (largest end), and the summed durations of compute
# tasks and of collective tasks, all in ms, with three decimals.
set -eu
awk -F, 'NR == 1 && $8 != "end_us" { print "not a parmsim trace: " FILENAME > "/dev/stderr"; exit 2 }
  NR > 1 { if ($8 > m) m = $8; if ($5 == "compute") c += $9; else n += $9 }
  END { printf "%.3f %.3f %.3f\n", m / 1e3, c / 1e3, n / 1e3 }' "${1:?usage: backend/trace-summary.sh TRACE.csv}"
