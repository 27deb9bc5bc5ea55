#!/usr/bin/env bash
# Installs playwright-core (pinned by package-lock.json) once, then drives the status page
# of a real `kforge serve` in headless Chromium. Usage: tests/browser/run.sh KFORGE OUT_DIR
set -euo pipefail
cd "$(dirname "$0")"
if [ ! -d node_modules/playwright-core ]; then
  npm ci --no-audit --no-fund --loglevel=error
fi
exec node status_page.mjs --kforge "$1" --out "$2"
