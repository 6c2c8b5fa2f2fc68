#!/usr/bin/env bash
# tests/api/run_pytest.sh LIBWEFT SOURCE_DIR WEFT_BINARY — python/tests with pytest against LIBWEFT
# (the build tree's libweft.so.1). Exit 77 (skipped) without pytest; no test collected is a failure.
set -uo pipefail
library=$1 source_dir=$2 weft_binary=$3
. "$(dirname "$0")/python_for_tests.sh"
cd "$source_dir"
WEFT_LIBRARY=$library PYTHONPATH=$source_dir/python WEFT_BINARY=$weft_binary PYTHONDONTWRITEBYTECODE=1 \
    "$PYTHON" -m pytest -q -p no:cacheprovider python/tests
status=$?
if [ $status -eq 5 ]; then
    echo "run_pytest.sh: pytest collected no tests in python/tests" >&2
    exit 1
fi
exit $status
