#!/usr/bin/env bash
# What a Go user does: a new module outside this repository that requires
# github.com/dlbridge/dlbridge (a replace directive points at this checkout)
# builds with CGO_ENABLED=0 and runs the README's first Go example, taken
# from README.md itself so that the README cannot drift. Offline: the
# module's dependencies come from the checkout's go.sum and the module cache
# that building the checkout filled.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
GO=${GO:-go}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The first ```go block after the heading "## From Go".
awk '/^## From Go$/ {h=1} h && /^```go$/ {c=1; next} c && /^```$/ {exit} c {print}' README.md > "$tmp/main.go"
if ! grep -q '^package main$' "$tmp/main.go"; then
  echo "check-gomodule: no Go example found under '## From Go' in README.md" >&2
  exit 1
fi

cat > "$tmp/go.mod" <<EOF
module example.com/dlbridgeuser

go 1.25.0

require github.com/dlbridge/dlbridge v0.0.0

replace github.com/dlbridge/dlbridge => $root
EOF
cp go.sum "$tmp/go.sum"

cd "$tmp"
export CGO_ENABLED=0 GOFLAGS=-mod=mod GOPROXY=${GOPROXY_CHECK:-off}
"$GO" mod tidy
"$GO" vet .
"$GO" build -o "$tmp/example" .
out=$("$tmp/example")
echo "README example (CGO_ENABLED=0, module outside the repo): $out"
# The example prints a view and whether it shares the data of the slice.
if [[ "$out" != *true ]]; then
  echo "check-gomodule: the README example printed '$out', expected it to end with 'true'" >&2
  exit 1
fi
