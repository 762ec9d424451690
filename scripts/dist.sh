#!/usr/bin/env bash
# dist.sh builds the release files into dist/ and checks them (`make dist`):
#   - the sdist (pybridge/python/setup.py sdist: Python package, C source,
#     tests, LICENSE, and the Go module with its dependencies vendored);
#   - the wheel, built from that sdist alone with no network (GOPROXY=off,
#     an empty module cache), twice in two directories: both builds must be
#     byte-identical (SOURCE_DATE_EPOCH: the commit's time);
#   - scripts/check-dist.py: tags against the binaries' glibc needs, contents,
#     LICENSE, py.typed and stubs.
# Env: GO, PY (the Python that builds, with setuptools and wheel).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-/usr/bin/python3}
export GO=${GO:-go}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
rm -rf dist
mkdir -p dist build
(cd pybridge/python && "$PY" setup.py -q sdist -d "$ROOT/dist" >/dev/null)
sdists=(dist/dlbridge-*.tar.gz)
[[ ${#sdists[@]} -eq 1 && -f ${sdists[0]} ]] || { echo "dist: no sdist was made" >&2; exit 1; }

work=$(mktemp -d "$ROOT/build/dist.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
for n in 1 2; do
	mkdir -p "$work/src$n" "$work/modcache$n" "$work/out$n"
	tar -xzf "${sdists[0]}" -C "$work/src$n"
	# Offline: no module proxy, an empty module cache; the sdist's vendor/ is all there is.
	(cd "$work" && GOPROXY=off GOFLAGS=-mod=vendor GOMODCACHE="$work/modcache$n" GOTOOLCHAIN=local \
		"$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$work/out$n" "$work/src$n"/dlbridge-*/)
done
w1=("$work"/out1/*.whl) w2=("$work"/out2/*.whl)
if [[ $(basename "${w1[0]}") != $(basename "${w2[0]}") ]] || ! cmp -s "${w1[0]}" "${w2[0]}"; then
	echo "dist: two builds of the wheel from one sdist differ: ${w1[*]} ${w2[*]}" >&2
	exit 1
fi
echo "dist: two offline builds from the sdist gave byte-identical wheels: $(basename "${w1[0]}") $(sha256sum < "${w1[0]}" | cut -c1-16)"
cp "${w1[0]}" dist/
"$PY" scripts/check-dist.py dist/*.tar.gz dist/*.whl
