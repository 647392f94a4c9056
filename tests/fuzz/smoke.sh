#!/usr/bin/env bash
# CI's fuzz smoke run: builds every harness and runs each for FUZZ_SECONDS
# (default 10), FUZZ_JOBS at a time, on the seed corpora; fails on any
# crash or sanitizer report.
# Usage (from the repository): tests/fuzz/smoke.sh [make options, e.g. O=DIR]
set -euo pipefail
cd "$(dirname "$0")/../.."
exec make -f Makefile -f tests/fuzz/fuzz.mk fuzz FUZZ_SECONDS="${FUZZ_SECONDS:-10}" "$@"
