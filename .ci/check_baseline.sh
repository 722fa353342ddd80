#!/usr/bin/env bash
# The check step of CI: compare a sweep with a baseline; exits 1 on a regression, 2 on bad input.
# With CHECK_REPORTS=DIR set, also writes DIR/roundoff-check.md and DIR/roundoff-check.xml (JUnit).
# Usage: .ci/check_baseline.sh RESULTS BASELINE [more `roundoff check` options]
set -euo pipefail
results=${1:?usage: .ci/check_baseline.sh RESULTS BASELINE [roundoff check options]}
baseline=${2:?usage: .ci/check_baseline.sh RESULTS BASELINE [roundoff check options]}
shift 2
if [[ -n "${CHECK_REPORTS:-}" ]]; then
    set -- --markdown "$CHECK_REPORTS/roundoff-check.md" --junit "$CHECK_REPORTS/roundoff-check.xml" "$@"
fi
exec roundoff check "$results" --baseline "$baseline" "$@"
