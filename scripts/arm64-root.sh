#!/usr/bin/env bash
# arm64-root.sh DIR: Debian's arm64 CPython 3.11 (with libffi for ctypes, and
# the arm64 pyconfig.h that building the extension for aarch64 needs),
# unpacked into DIR/root from packages that apt downloads through a state of
# its own (DIR/apt): the machine's apt configuration and architectures are
# left alone. Writes DIR/python3, which runs that CPython under qemu-user
# with argv[0] kept, so that sys.executable (and a venv made from it) starts
# again from a subprocess without binfmt_misc. Kept once made.
set -euo pipefail
A=$(realpath -m "$1")
py=$A/root/usr/bin/python3.11
conf=$A/root/usr/include/aarch64-linux-gnu/python3.11/pyconfig.h
if [[ ! -x $py || ! -f $conf ]]; then
	rm -rf "$A/apt" "$A/root"
	mkdir -p "$A/apt/lists/partial" "$A/apt/archives/partial" "$A/root"
	: >"$A/apt/status"
	opts=(-o APT::Architecture=arm64 -o APT::Architectures=arm64 -o "Dir::State::Lists=$A/apt/lists"
		-o "Dir::Cache::archives=$A/apt/archives" -o "Dir::State::status=$A/apt/status"
		-o Dir::Cache::pkgcache= -o Dir::Cache::srcpkgcache= -o Debug::NoLocking=1 -o APT::Sandbox::User=root)
	apt-get "${opts[@]}" update -qq
	apt-get "${opts[@]}" install -y -qq --download-only --no-install-recommends \
		python3.11-minimal libpython3.11-stdlib libffi8 >/dev/null
	(cd "$A/apt/archives" && apt-get "${opts[@]}" download -qq libpython3.11-dev)
	for d in "$A"/apt/archives/*.deb; do
		dpkg-deb -x "$d" "$A/root"
	done
	[[ -x $py && -f $conf ]] || { echo "arm64-root: $py or $conf is missing after unpacking" >&2; exit 1; }
fi
printf '#!/bin/sh\nPYTHONHOME=%q exec %q -L %q -0 "$0" %q "$@"\n' \
	"$A/root/usr" "${QEMU:-qemu-aarch64-static}" "$A/root" "$py" >"$A/python3"
chmod +x "$A/python3"
