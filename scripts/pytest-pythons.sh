#!/usr/bin/env bash
# pytest-pythons.sh WHEEL PYTHON...: installs the wheel into a fresh virtual
# environment of each CPython given (the machine image's pyenv versions from
# 3.10 up, `make pytest-pythons`; Debian's arm64 CPython under qemu-user,
# `make pytest-aarch64`) and runs, from /tmp against that install,
# the part of the Python suite that needs no NumPy or PyTorch (those are
# Debian's 3.11 only): import, the buffer protocol, DLPack capsules, dtypes,
# the extension's own functions.
# pytest comes from Debian's pure-Python packages (python3-pytest and, for
# 3.10, python3-exceptiongroup and python3-tomli), put on PYTHONPATH alone:
# the image's CPythons have no pytest and CI has no PyPI.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
wheel=$1
shift
(($#)) || { echo "pytest-pythons: no CPython 3.10 or later given (PYTHONS)" >&2; exit 1; }

dist=/usr/lib/python3/dist-packages
shim=$ROOT/build/pytest-pure
rm -rf "$shim" "$shim-pip" && mkdir -p "$shim"
for n in _pytest pytest pluggy py py.py iniconfig packaging attr exceptiongroup tomli; do
	[[ -e $dist/$n ]] || { echo "pytest-pythons: $dist/$n is missing (apt-get install python3-pytest python3-exceptiongroup python3-tomli)" >&2; exit 1; }
	ln -s "$dist/$n" "$shim/$n"
done

tests=(test_basic.py test_capsule.py test_dtypes.py test_dlpack_args.py test_extension.py test_foreign.py)
rc=0
for py in "$@"; do
	v=$("$py" -c 'import platform, sys; print("%d.%d.%d-%s" % (sys.version_info[:3] + (platform.machine(),)))')
	venv=$ROOT/build/pythons/$v
	rm -rf "$venv"
	if "$py" -c 'import ensurepip' 2>/dev/null; then
		"$py" -m venv "$venv"
		"$venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
	else # Debian's arm64 python3.11-minimal: Debian's pip (pure Python) installs
		"$py" -m venv --without-pip "$venv"
		mkdir -p "$shim-pip" && ln -sfn "$dist/pip" "$shim-pip/pip"
		PYTHONPATH="$shim-pip" "$venv/bin/python" -m pip install -q --no-index --no-deps "$wheel"
	fi
	echo "pytest-pythons: CPython $v"
	if ! (cd /tmp && env -u DLBRIDGE_LIB DLBRIDGE_EXPECT_INSTALLED=1 PYTHONPATH="$shim" \
		"$venv/bin/python" -m pytest -q -p no:cacheprovider -W ignore::DeprecationWarning \
		"${tests[@]/#/$ROOT/pybridge/python/tests/}"); then
		echo "pytest-pythons: CPython $v failed"
		rc=1
	fi
done
exit $rc
