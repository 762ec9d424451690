#!/usr/bin/env bash
# stages.sh STAGE...: runs each make target in turn, as `make test` does, and
# says where the run is: a line when a stage starts (its number, the time
# since the first began) and one when it ends (pass or FAIL, its own time),
# then a table of every stage's time. The first failing stage stops the run
# (as make's prerequisites did), its name in the last line.
#
# Each stage is a make of its own, so a prerequisite that several stages
# share (the release files, the venv) would be built again by each: a
# stage named in STAGES_ONCE is, once it has passed, passed to the later
# makes as -o (make's --assume-old), which neither remakes it nor descends
# into its prerequisites. STAGES_LOG=file also appends the table there (the
# closing note of a CI run quotes it).
set -uo pipefail
MAKE=${MAKE:-make}
(($#)) || { echo "stages.sh: no stages given" >&2; exit 2; }
start=$SECONDS
n=$#
i=0
declare -a done_names done_secs old=()
once=" ${STAGES_ONCE:-} "
fmt() { printf '%d:%02d' $(($1 / 60)) $(($1 % 60)); }
summary() {
	local k out=""
	for k in "${!done_names[@]}"; do
		out+=$(printf '   %-20s %7s\n' "${done_names[$k]}" "$(fmt "${done_secs[$k]}")")$'\n'
	done
	out+=$(printf '   %-20s %7s' total "$(fmt $((SECONDS - start)))")
	echo "== stage times (m:ss):"
	echo "$out"
	if [ -n "${STAGES_LOG:-}" ]; then
		{ echo "stage times (m:ss), $(date -u +%FT%TZ):"; echo "$out"; } >> "$STAGES_LOG"
	fi
}
for stage in "$@"; do
	i=$((i + 1))
	t0=$SECONDS
	echo "== [$i/$n] $stage (at $(fmt $((t0 - start))))"
	$MAKE --no-print-directory "${old[@]}" "$stage"
	rc=$?
	done_names+=("$stage")
	done_secs+=($((SECONDS - t0)))
	if [ $rc -ne 0 ]; then
		echo "== [$i/$n] $stage FAILED (status $rc) after $(fmt $((SECONDS - t0)))"
		summary
		echo "== make test failed at stage $stage" >&2
		exit $rc
	fi
	echo "== [$i/$n] $stage passed in $(fmt $((SECONDS - t0)))"
	if [[ $once == *" $stage "* ]]; then
		old+=(-o "$stage")
	fi
done
summary
echo "== all $n stages passed"
