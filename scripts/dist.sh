#!/usr/bin/env bash
# dist.sh builds the release files into dist/ and checks them (`make dist`):
#   - the sdist (pybridge/python/setup.py sdist: Python package, C source,
#     tests, LICENSE, and the Go module with its dependencies vendored);
#   - a wheel for each of DIST_ARCHES, built from that sdist alone with no
#     network (GOPROXY=off, an empty module cache), twice in two directories:
#     both builds must be byte-identical (SOURCE_DATE_EPOCH: the commit's time);
#   - scripts/check-dist.py: tags against the binaries' glibc needs, contents,
#     LICENSE, py.typed and stubs.
# Env: GO, PY (the Python that builds, with setuptools and wheel), DIST_ARCHES
# (the wheels' architectures: this machine's by default; aarch64 is
# cross-built on x86_64 with Debian's gcc-aarch64-linux-gnu).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
PY=${PY:-/usr/bin/python3}
export GO=${GO:-go}
export SOURCE_DATE_EPOCH=${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct)}
rm -rf dist
mkdir -p dist build
echo "dist: the sdist (the Go module vendored)"
(cd pybridge/python && "$PY" setup.py -q sdist -d "$ROOT/dist" >/dev/null)
sdists=(dist/dlbridge-*.tar.gz)
[[ ${#sdists[@]} -eq 1 && -f ${sdists[0]} ]] || { echo "dist: no sdist was made" >&2; exit 1; }

host=$(uname -m)
work=$(mktemp -d "$ROOT/build/dist.XXXXXX")
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT

# build_wheel ARCH N: the wheel for ARCH from the sdist alone, offline (no
# module proxy, an empty module cache: the sdist's vendor/ is all there is),
# in a directory of its own, into $work/ARCH.N.
build_wheel() {
	local arch=$1 n=$2 src=$work/src.$1.$2 out=$work/$1.$2
	echo "dist: the $arch wheel from the sdist, build $n of 2 ($SECONDS s so far)"
	mkdir -p "$src" "$out" "$work/modcache.$1.$2"
	tar -xzf "${sdists[0]}" -C "$src"
	local env=(GOPROXY=off GOFLAGS=-mod=vendor GOMODCACHE="$work/modcache.$1.$2" GOTOOLCHAIN=local)
	if [[ $arch == "$host" ]]; then
		(cd "$work" && env "${env[@]}" "$PY" -m pip wheel -q --no-build-isolation --no-deps -w "$out" "$src"/dlbridge-*/)
	elif [[ $arch == aarch64 ]]; then
		# Cross-built: Go for arm64 with cgo through Debian's aarch64 gcc (its
		# glibc 2.36 stubbed down to 2.17 as on x86_64), the extension against
		# this Python's headers and the arm64 pyconfig.h (scripts/arm64-root.sh).
		(cd "$src"/dlbridge-*/ && env "${env[@]}" GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
			LDSHARED="aarch64-linux-gnu-gcc -shared" CFLAGS="-I$ROOT/build/arm64/root/usr/include" \
			"$PY" setup.py -q bdist_wheel --plat-name linux_aarch64 -d "$out" >/dev/null 2>&1) || {
			echo "dist: the aarch64 wheel did not build; again with its output:" >&2
			(cd "$src"/dlbridge-*/ && env "${env[@]}" GOARCH=arm64 CC=aarch64-linux-gnu-gcc \
				LDSHARED="aarch64-linux-gnu-gcc -shared" CFLAGS="-I$ROOT/build/arm64/root/usr/include" \
				"$PY" setup.py -q bdist_wheel --plat-name linux_aarch64 -d "$out.again")
			exit 1
		}
	else
		echo "dist: no way to build for $arch here (DIST_ARCHES)" >&2
		exit 1
	fi
}

for arch in ${DIST_ARCHES:-$host}; do
	if [[ $arch == aarch64 && $host != aarch64 ]]; then
		command -v aarch64-linux-gnu-gcc >/dev/null || {
			echo "dist: aarch64 needs Debian's gcc-aarch64-linux-gnu (or DIST_ARCHES=$host)" >&2; exit 1; }
		bash scripts/arm64-root.sh build/arm64
	fi
	build_wheel "$arch" 1
	build_wheel "$arch" 2
	w1=("$work/$arch.1"/*.whl) w2=("$work/$arch.2"/*.whl)
	if [[ ! -f ${w1[0]} || $(basename "${w1[0]}") != $(basename "${w2[0]}") ]] || ! cmp -s "${w1[0]}" "${w2[0]}"; then
		echo "dist: two builds of the $arch wheel from one sdist differ: ${w1[*]} ${w2[*]}" >&2
		exit 1
	fi
	echo "dist: two offline builds from the sdist gave byte-identical wheels: $(basename "${w1[0]}") $(sha256sum <"${w1[0]}" | cut -c1-16)"
	cp "${w1[0]}" dist/
done
"$PY" scripts/check-dist.py dist/*.tar.gz dist/*.whl
