#!/usr/bin/env bash
# Copies the built kforge binary and the non-glibc shared libraries it links (as ldd
# names them) into a self-contained folder, for a GPU host that lacks Debian's
# libcpp-httplib, brotli and friends. Usage: scripts/bundle.sh [BUILD_DIR] [OUT_DIR]
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-.bundle}
rm -rf "$OUT"
mkdir -p "$OUT/lib" "$OUT/bin"
cp "$BUILD/bin/kforge" "$OUT/bin/kforge.real"
strip --strip-debug "$OUT/bin/kforge.real"
ldd "$BUILD/service/kforge" | awk '/=> \// {print $3}' | while read -r lib; do
  case "$(basename "$lib")" in
    libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;  # the host's glibc
    *) cp -L "$lib" "$OUT/lib/" ;;
  esac
done
cat > "$OUT/bin/kforge" <<'SH'
#!/bin/sh
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/kforge.real" "$@"
SH
chmod +x "$OUT/bin/kforge"
echo "bundled into $OUT: $(ls "$OUT/lib" | tr '\n' ' ')"
