#!/usr/bin/env bash
# The solo-learn main side of CI: builds .venv-main (scripts/bootstrap-main.sh, from the vendored
# sources in ../shared/vendor or $SOLO_HYPER_SHARED/vendor) and runs, there, the tests of the
# adapter for solo-learn main: tests/solo/test_solo_main.py (with run-solo of solo main's own
# main_pretrain.py and main_linear.py, and its Hydra multirun as local submitit jobs and on a real
# one-node SLURM: tests/slurm_cluster.py, which needs root), solo-learn's own method harness for
# every method, the adapter contract and the methods whose step state the adapters carry. Nothing
# may be skipped.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/bootstrap-main.sh"
cd "$root"
log="$(mktemp)"
trap 'rm -f "$log"' EXIT
export PYTHONWARNINGS="${PYTHONWARNINGS:-ignore}"
.venv-main/bin/python -m pytest -q -rs -p no:cacheprovider \
  tests/solo/test_solo_main.py tests/solo/test_solo_harness.py tests/solo/test_adapter_contract.py \
  tests/methods/test_rhcl.py tests/methods/test_ebclr_method.py tests/methods/test_ebclr_ddp_resume.py tests/test_sgld.py \
  tests/methods/test_methods.py tests/solo/test_registration.py \
  "tests/launch/test_cluster.py::test_under_slurm_lightnings_auto_requeue_is_off" \
  "$@" | tee "$log"
if grep -qE "^SKIPPED|[0-9]+ skipped" "$log"; then
  echo "[test-main] tests were skipped in the solo-learn main environment (see above)" >&2
  exit 1
fi
