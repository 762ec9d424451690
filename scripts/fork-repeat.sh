#!/usr/bin/env bash
# fork-repeat.sh ROUNDS JOBS CMD...: runs CMD (the fork tests, make
# pytest-fork-repeat) ROUNDS times, JOBS rounds at a time, and prints a line
# as each round passes. The first failing round stops the others and prints
# its output. Rounds are separate process trees with nothing in common
# (each pytest has its own --basetemp), so on two cores two at a time halve
# the wall time, and the load they put on each other is one more way to
# shake out a fork race, not a way to hide one.
set -uo pipefail
rounds=$1 jobs=$2
shift 2
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
start=$SECONDS
declare -A pid_round=()
failed=0

reap() { # waits for one round to end and reports it
	local pid rc
	wait -n -p pid
	rc=$?
	local r=${pid_round[$pid]}
	unset "pid_round[$pid]"
	if [ $rc -ne 0 ]; then
		cat "$dir/$r.log"
		echo "pytest-fork-repeat: round $r of $rounds failed (status $rc)"
		failed=1
		return
	fi
	echo "pytest-fork-repeat: round $r of $rounds passed ($(tail -n 1 "$dir/$r.log" | sed 's/^=* *//; s/ *=*$//')), $((SECONDS - start)) s so far"
}

for r in $(seq "$rounds"); do
	while [ ${#pid_round[@]} -ge "$jobs" ]; do
		reap
		[ $failed -eq 0 ] || break 2
	done
	mkdir -p "$dir/tmp$r"
	"$@" --basetemp="$dir/tmp$r" > "$dir/$r.log" 2>&1 &
	pid_round[$!]=$r
done
while [ $failed -eq 0 ] && [ ${#pid_round[@]} -gt 0 ]; do
	reap
done
if [ $failed -ne 0 ]; then
	for pid in "${!pid_round[@]}"; do kill "$pid" 2>/dev/null; done
	wait
	exit 1
fi
echo "pytest-fork-repeat: $rounds rounds passed, $jobs at a time, in $((SECONDS - start)) s"
