#!/usr/bin/env bash
# Fails when any tracked C++ file differs from .clang-format (Google style).
set -euo pipefail
cd "$(dirname "$0")/.."
# Without git (or as another user than the checkout's owner, whom git
# refuses), every source file outside the build directories.
mapfile -t files < <(git ls-files --cached --others --exclude-standard '*.cc' '*.h' 2>/dev/null ||
  find . \( -name '*.cc' -o -name '*.h' \) -not -path './build*')
[ ${#files[@]} -gt 0 ] || { echo "no C++ files found"; exit 1; }
if ! clang-format --dry-run --Werror "${files[@]}"; then
  echo "clang-format: the files above need formatting (run: clang-format -i FILE)"
  exit 1
fi
# A raw NUL byte in a source (a '\0' written as the byte itself) builds
# with some compilers and fails others under -Werror (-Wnull-character).
if nul=$(grep -lP '\x00' -a -- "${files[@]}"); then
  echo "raw NUL bytes in: ${nul} (write '\\0' instead)"
  exit 1
fi
echo "clang-format: ${#files[@]} files clean"
