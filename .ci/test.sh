#!/usr/bin/env bash
# Set-up, build, then every test: the lit suite (check-strata) and the unit
# tests, all through ctest.
set -euo pipefail
cd "$(dirname "$0")/.."

bash .ci/build.sh
BUILD_DIR=${BUILD_DIR:-build}
cd "$BUILD_DIR"
ctest --output-on-failure
