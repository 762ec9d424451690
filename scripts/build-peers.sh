#!/usr/bin/env bash
# Builds the peers bench_gofunc.py measures dlbridge against, from their
# sources, for one CPython, into one folder:
#   OUT/tvm_ffi/             apache/tvm-ffi's Python package (Cython core, libtvm_ffi.so)
#   OUT/tvmffi_peers.so      noop2, noop9, nothing, scale exported through tvm-ffi (bench/peers/tvmffi_peers.cc)
#   OUT/nanobind_peers*.so   the same four functions as a nanobind module (bench/peers/nanobind_peers.cpp)
# bench_gofunc.py uses them when DLBRIDGE_BENCH_PEERS=OUT.
#
# Usage: scripts/build-peers.sh [PYTHON [OUT]]
#   PYTHON  the CPython to build for (default python3); its headers must be
#           installed. For the GPU machine (Python 3.12, no cmake there) build
#           here with a CPython 3.12, e.g. /root/.pyenv/versions/3.12.1/bin/python3,
#           into build/gpu/peers after `make gpu` (GPU_PEERS does both).
#   OUT     default build/peers
# The sources, checked out beforehand (nothing is downloaded):
#   TVM_FFI_SRC   apache/tvm-ffi with 3rdparty/dlpack checked out (its DLPack
#                 header must declare the exchange API, DLPack 1.2)
#   CYTHON_SRC    cython/cython; the compiler runs from the checkout
#   NANOBIND_SRC  wjakob/nanobind with ext/robin_map checked out (optional:
#                 without it no nanobind peer is built)
# Needs cmake and ninja (or make) and g++ here; tvm-ffi's CMakeLists.txt
# asks for cmake 3.26 and builds with 3.25 (Debian 12's) when that line is lowered.
set -euo pipefail
cd "$(dirname "$0")/.."
R=$PWD
PY=${1:-python3}
OUT=${2:-build/peers}

die() { echo "build-peers: $*" >&2; exit 1; }
[ -n "${TVM_FFI_SRC:-}" ] || die "set TVM_FFI_SRC to a checkout of apache/tvm-ffi"
[ -n "${CYTHON_SRC:-}" ] || die "set CYTHON_SRC to a checkout of cython/cython"
[ -d "$TVM_FFI_SRC" ] || die "TVM_FFI_SRC=$TVM_FFI_SRC is not a folder"
[ -d "$CYTHON_SRC" ] || die "CYTHON_SRC=$CYTHON_SRC is not a folder"
TVM_FFI_SRC=$(cd "$TVM_FFI_SRC" && pwd)
CYTHON_SRC=$(cd "$CYTHON_SRC" && pwd)
DLPACK_H=$TVM_FFI_SRC/3rdparty/dlpack/include/dlpack/dlpack.h
[ -f "$DLPACK_H" ] || die "$DLPACK_H is missing: check out tvm-ffi's submodule 3rdparty/dlpack (dmlc/dlpack)"
grep -q DLPackExchangeAPI "$DLPACK_H" || die "$DLPACK_H does not declare DLPackExchangeAPI: tvm-ffi needs DLPack 1.2's header"
[ -f "$CYTHON_SRC/Cython/__init__.py" ] || die "CYTHON_SRC=$CYTHON_SRC holds no Cython/ package"
command -v cmake >/dev/null || die "no cmake (apt-get install cmake)"
PY=$(command -v "$PY") || die "no Python $1"
PYINC=$("$PY" -c 'import sysconfig; print(sysconfig.get_paths()["include"])')
[ -f "$PYINC/Python.h" ] || die "$PY has no headers ($PYINC/Python.h)"
SUFFIX=$("$PY" -c 'import sysconfig; print(sysconfig.get_config_var("EXT_SUFFIX"))')
PYVER=$("$PY" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
GEN=Ninja; command -v ninja >/dev/null || GEN="Unix Makefiles"
CXX=${CXX:-g++}

mkdir -p "$OUT"; OUT=$(cd "$OUT" && pwd)
B=$R/build/peers-cmake/py$PYVER   # cmake's build tree, one per Python
rm -rf "$OUT/tvm_ffi" "$B/stage"
# A build tree configured from another checkout is started again (cmake
# refuses to reuse it).
grep -qx "CMAKE_HOME_DIRECTORY:INTERNAL=$TVM_FFI_SRC" "$B/CMakeCache.txt" 2>/dev/null || rm -rf "$B"
mkdir -p "$B"
echo "build-peers: tvm-ffi $(git -C "$TVM_FFI_SRC" describe --tags --always) for $PY ($PYVER) into $OUT"

# tvm-ffi as its wheel lays it out (pyproject.toml: wheel.install-dir tvm_ffi),
# without libbacktrace (its submodule is not needed for calls) and without
# the SIGSEGV handler: the Go runtime in the same process turns faults in Go
# code into panics and must see them first.
PYTHONPATH=$CYTHON_SRC${PYTHONPATH:+:$PYTHONPATH} cmake -S "$TVM_FFI_SRC" -B "$B" -G "$GEN" \
  -DCMAKE_BUILD_TYPE=Release -DPython_EXECUTABLE="$PY" -DCMAKE_INSTALL_PREFIX="$B/stage" \
  -DTVM_FFI_BUILD_PYTHON_MODULE=ON -DTVM_FFI_BUILD_TESTS=OFF \
  -DTVM_FFI_USE_LIBBACKTRACE=OFF -DTVM_FFI_BACKTRACE_ON_SEGFAULT=OFF > "$B.configure.log" 2>&1 ||
  { tail -30 "$B.configure.log"
    grep -q "or higher is required" "$B.configure.log" &&
      die "cmake $(cmake --version | head -1 | awk '{print $3}') is older than $TVM_FFI_SRC/CMakeLists.txt asks: install a newer one or lower its cmake_minimum_required to 3.25"
    die "cmake configure failed (log: $B.configure.log)"; }
PYTHONPATH=$CYTHON_SRC${PYTHONPATH:+:$PYTHONPATH} cmake --build "$B" -j "$(nproc)" > "$B.build.log" 2>&1 ||
  { tail -30 "$B.build.log"; die "build failed (log: $B.build.log)"; }
cmake --install "$B" > /dev/null
mkdir -p "$OUT/tvm_ffi/lib"
(cd "$TVM_FFI_SRC/python/tvm_ffi" && find . -name '*.py' -o -name '*.pyi' -o -name py.typed) |
  while read -r f; do mkdir -p "$OUT/tvm_ffi/$(dirname "$f")"; cp "$TVM_FFI_SRC/python/tvm_ffi/$f" "$OUT/tvm_ffi/$f"; done
cp "$B/stage"/core*"$SUFFIX" "$OUT/tvm_ffi/"
cp "$B/stage"/lib/libtvm_ffi*.so "$OUT/tvm_ffi/lib/"
strip --strip-unneeded "$OUT/tvm_ffi"/core*.so "$OUT/tvm_ffi/lib"/*.so
V=$(git -C "$TVM_FFI_SRC" describe --tags --always --dirty)
printf '__version__ = "%s"\n__version_tuple__ = tuple("%s".split("."))\n' "${V#v}" "${V#v}" > "$OUT/tvm_ffi/_version.py"

# The tvm-ffi functions: a plain shared library against libtvm_ffi.so, found
# beside it at run time. It does not depend on the Python version.
"$CXX" -O2 -std=c++17 -shared -fPIC -fvisibility=hidden \
  -I "$TVM_FFI_SRC/include" -I "$TVM_FFI_SRC/3rdparty/dlpack/include" \
  bench/peers/tvmffi_peers.cc -L "$OUT/tvm_ffi/lib" -ltvm_ffi -Wl,-rpath,'$ORIGIN/tvm_ffi/lib' -Wl,-s \
  -o "$OUT/tvmffi_peers.so"

# The nanobind module, compiled as nanobind's src/nb_combined.cpp says to
# build it without CMake (libnanobind -O3, the bindings -Os, as its CMake does).
rm -f "$OUT"/nanobind_peers*.so
if [ -n "${NANOBIND_SRC:-}" ]; then
  [ -f "$NANOBIND_SRC/ext/robin_map/include/tsl/robin_map.h" ] ||
    die "$NANOBIND_SRC/ext/robin_map is empty: check out nanobind's submodule (Tessil/robin-map)"
  NBF=(-std=c++17 -fPIC -fvisibility=hidden -DNDEBUG -DNB_COMPACT_ASSERTIONS -fno-stack-protector
       -I "$PYINC" -I "$NANOBIND_SRC/include" -I "$NANOBIND_SRC/ext/robin_map/include")
  "$CXX" "${NBF[@]}" -O3 -fno-strict-aliasing -ffunction-sections -fdata-sections \
    -c "$NANOBIND_SRC/src/nb_combined.cpp" -o "$B/libnanobind.o"
  "$CXX" "${NBF[@]}" -Os -c bench/peers/nanobind_peers.cpp -o "$B/nanobind_peers.o"
  "$CXX" -shared -Wl,-s -Wl,--gc-sections "$B/nanobind_peers.o" "$B/libnanobind.o" \
    -o "$OUT/nanobind_peers$SUFFIX"
  echo "build-peers: nanobind $(git -C "$NANOBIND_SRC" describe --tags --match 'v[0-9]*' --always)"
else
  echo "build-peers: NANOBIND_SRC not set: no nanobind peer"
fi
du -sh "$OUT"
