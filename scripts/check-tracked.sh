#!/usr/bin/env bash
# check-tracked.sh fails, listing them, when git tracks build artefacts:
# files that .gitignore ignores (git ls-files -ci --exclude-standard) and
# binaries by their magic number: ELF (executables, shared objects, object
# files), Mach-O (thin and universal) and ar archives (static libraries).
# Run from anywhere in the repository; `make test` runs it first.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"

bad=()
while IFS= read -r -d '' f; do
	bad+=("$f (ignored by .gitignore)")
done < <(git ls-files -z -ci --exclude-standard)

while IFS= read -r -d '' f; do
	[[ -f $f && ! -L $f ]] || continue # deleted in the work tree, or a link
	magic=$(head -c 8 -- "$f" | od -An -tx1 | tr -d ' \n')
	case $magic in
	7f454c46*) kind="ELF binary" ;;
	feedface* | feedfacf* | cefaedfe* | cffaedfe* | cafebabe*) kind="Mach-O binary" ;;
	213c617263683e0a) kind="ar archive" ;;
	*) continue ;;
	esac
	bad+=("$f ($kind)")
done < <(git ls-files -z)

if ((${#bad[@]})); then
	echo "check-tracked: build artefacts are tracked; git rm --cached them (and extend .gitignore):" >&2
	printf '  %s\n' "${bad[@]}" >&2
	exit 1
fi
echo "check-tracked: no build artefacts tracked"
