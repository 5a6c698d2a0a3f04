#!/usr/bin/env bash
# A new user's install: `pip install .` into a fresh venv, no extras, then the demo job headless.
# Fails if anything the demo trainer or the runner imports is missing from the runtime dependencies.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
echo "plain install: fresh venv in $work"
"$PYTHON" -m venv "$work/venv"
for step in "--upgrade pip" "."; do
    # shellcheck disable=SC2086
    if ! "$work/venv/bin/python" -m pip install -q $step > "$work/pip.log" 2>&1; then
        grep -v '^WARNING: Location' "$work/pip.log"
        echo "plain install: pip install $step failed"
        exit 1
    fi
done
"$work/venv/bin/python" -c "import gpuwizard" || { echo "plain install: gpuwizard did not install"; exit 1; }
export GPUWIZARD_CONFIG_DIR="$work/config" GPUWIZARD_DATA_DIR="$work/data"
cd "$work"  # outside the checkout: only the installed package and its shipped presets are used
if "$work/venv/bin/gpuwizard" run demo-cpu --headless > "$work/run.log" 2>&1; then
    tail -n 2 "$work/run.log"
    echo "plain install: demo-cpu finished green"
else
    cat "$work/run.log"
    echo "plain install: demo-cpu failed"
    exit 1
fi
