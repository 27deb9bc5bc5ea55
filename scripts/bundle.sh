#!/usr/bin/env bash
# Copies the built kforge binary, its runner programs and the non-system shared libraries
# they link (as ldd names them) into a self-contained folder, for a GPU host that lacks
# Debian's libcpp-httplib, brotli, libffi and friends. glibc and the CUDA/ROCm runtimes are
# left to the host (they must match its driver). Usage: scripts/bundle.sh [BUILD_DIR] [OUT_DIR]
# KFORGE_BUNDLE_EXES names the programs (default: kforge and every runner); a GPU host's bundle
# without kforge-runner-cpu leaves out OpenBLAS (36 MB), e.g. to fit a 64 MiB transfer.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${1:-build}
OUT=${2:-.bundle}
rm -rf "$OUT"
mkdir -p "$OUT/lib" "$OUT/bin"
for exe in ${KFORGE_BUNDLE_EXES:-kforge kforge-runner-cpu kforge-runner-cuda kforge-runner-rocm}; do
  [ -x "$BUILD/bin/$exe" ] || continue
  dest="$OUT/bin/$exe"
  [ "$exe" = kforge ] && dest="$OUT/bin/kforge.real"
  cp "$BUILD/bin/$exe" "$dest"
  strip --strip-debug "$dest"
  ldd "$BUILD/bin/$exe" | awk '/=> \// {print $3}' | while read -r lib; do
    case "$(basename "$lib")" in
      libc.so.*|libm.so.*|libpthread.so.*|libdl.so.*|librt.so.*|ld-linux*) ;;      # the host's glibc
      libcuda*|libcublas*|libnvrtc*|libamdhip64*|libhsa*|libamd_comgr*) ;;          # the host's GPU runtime
      *) cp -L "$lib" "$OUT/lib/" ;;
    esac
  done
done
cat > "$OUT/bin/kforge" <<'SH'
#!/bin/sh
# Runner programs inherit LD_LIBRARY_PATH from the service, so they find lib/ too.
here=$(dirname "$(readlink -f "$0")")
LD_LIBRARY_PATH="$here/../lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" exec "$here/kforge.real" "$@"
SH
chmod +x "$OUT/bin/kforge"
echo "bundled into $OUT: $(ls "$OUT/bin" | tr '\n' ' ')| $(ls "$OUT/lib" | tr '\n' ' ')"
