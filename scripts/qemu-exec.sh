#!/usr/bin/env bash
# qemu-exec.sh BINARY ARGS...: `go test -exec` for a foreign-architecture test
# binary (GOARCH=arm64 here): runs it under qemu-user with QEMU_LD_PREFIX as
# its root (default /usr/aarch64-linux-gnu, Debian's libc6-arm64-cross). The
# binary's os.Args[0] is a small script beside it that runs it the same way,
# so that tests which start their own binary again work without binfmt_misc.
set -euo pipefail
bin=$1
shift
qemu=${QEMU:-qemu-aarch64-static}
root=${QEMU_LD_PREFIX:-/usr/aarch64-linux-gnu}
w=$bin.qemu
# Tests that read the process's resident set read qemu's too, which grows
# by about 280 KB for each thread started and ended under it (a C program
# starting 5,000 detached threads: 1.4 GB under qemu-aarch64, 0.3 MB
# natively): they leave that check to native runs.
export DLBRIDGE_EMULATED=qemu-user
printf '#!/bin/sh\nexec %q -L %q -0 "$0" %q "$@"\n' "$qemu" "$root" "$bin" >"$w"
chmod +x "$w"
exec "$w" "$@"
