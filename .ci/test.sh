#!/usr/bin/env bash
# Set-up, build, then every test: the lit suite (check-strata) and the unit
# tests, all through ctest; then how many lit tests ran.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/build.sh
BUILD_DIR=${BUILD_DIR:-build}
cd "$BUILD_DIR"
status=0
mkdir -p Testing
ctest --output-on-failure 2>&1 | tee Testing/ctest-output.txt ||
  status=${PIPESTATUS[0]}
# ctest shows a test's output only when it fails: the lit suite's counts,
# then ctest's closing line again.
echo "lit suite (one ctest entry):"
awk '/^Total Discovered Tests:/ { p = 1; print "  " $0; next }
     p && /^  / { print "  " $0; next }
     p { exit }' Testing/Temporary/LastTest.log
grep -E '^[0-9]+% tests passed' Testing/ctest-output.txt | tail -n 1
exit $status
