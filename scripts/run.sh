#!/usr/bin/env bash
# Sets everything up and runs the service on 127.0.0.1:8080 (override with --host/--port,
# or KFORGE_* variables) with its cache under $XDG_CACHE_HOME/kforge or ~/.cache/kforge.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh build
exec build/bin/kforge serve "$@"
