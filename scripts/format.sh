#!/bin/sh
# Formats the C sources git tracks (*.c, *.h) with clang-format and the style in .clang-format.
#   usage: scripts/format.sh [--check]
#   --check: change nothing; name every file that is not formatted and exit 1 if there is one.
# The style is written for clang-format 14 (Debian 12's clang-format); other versions may differ.
# Environment: CLANG_FORMAT (default clang-format-14 if present, else clang-format).
set -eu
cd "$(dirname "$0")/.."

check=0
case ${1-} in
'') ;;
--check) check=1 ;;
*)
    sed -n '2,4s/^# \{0,1\}//p' "$0" >&2
    exit 2
    ;;
esac

cf=${CLANG_FORMAT:-}
if [ -z "$cf" ]; then
    cf=clang-format
    command -v clang-format-14 >/dev/null && cf=clang-format-14
fi
command -v "$cf" >/dev/null || {
    echo "format.sh: $cf not found (scripts/setup.sh --tests installs clang-format)" >&2
    exit 2
}
# The files git tracks, except third_party/ (vendored code keeps its upstream form); outside a git
# checkout (a source archive), the project's folders' .c and .h files.
if ! files=$(git ls-files '*.c' '*.h' ':!third_party' 2>/dev/null) || [ -z "$files" ]; then
    files=$(find include gen templates runtime tools tests bench examples -name '*.[ch]' -type f | sort)
fi

if [ "$check" -eq 0 ]; then
    printf '%s\n' "$files" | while IFS= read -r f; do "$cf" -i --style=file "$f"; done
    exit 0
fi
bad=$(printf '%s\n' "$files" | while IFS= read -r f; do
    "$cf" --dry-run --Werror --style=file "$f" >/dev/null 2>&1 || printf '%s\n' "$f"
done)
if [ -n "$bad" ]; then
    echo "not formatted (scripts/format.sh formats them; the diff: $cf --style=file FILE | diff FILE -):" >&2
    printf '%s\n' "$bad" | sed 's/^/  /' >&2
    exit 1
fi
