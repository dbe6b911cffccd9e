#!/usr/bin/env bash
# The test command: bootstraps .venv/ when missing, then runs the whole test suite.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap.sh"
cd "$root"
exec .venv/bin/python -m pytest -q "$@"
