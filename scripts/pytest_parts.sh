#!/usr/bin/env bash
# `make pytest`: the suite in two parts. First on WORKERS processes (pytest-xdist; a module stays
# on one worker, so its fixtures start once; most integration time is waiting on processes),
# then the tests marked `alone` (they measure CPU, link and step speed) with the machine to
# themselves. Both parts run; the status is the first failing part's.
#   scripts/pytest_parts.sh PYTEST WORKERS [PYTEST ARGS...]
set -u
pytest=$1 workers=$2
shift 2
"$pytest" -q -n "$workers" --dist loadfile --alone=without "$@"
first=$?
"$pytest" -q --alone=only "$@"
second=$?
# 5: the part selected no test (the arguments chose tests of the other part only)
if [ "$first" -eq 5 ] && [ "$second" -eq 5 ]; then exit 5; fi
for rc in "$first" "$second"; do
  if [ "$rc" -ne 0 ] && [ "$rc" -ne 5 ]; then exit "$rc"; fi
done
exit 0
