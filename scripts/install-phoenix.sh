#!/usr/bin/env bash
# Install Arize Phoenix into its OWN virtual environment, for the end-to-end tests in tests/e2e/ and
# the screenshot script (scripts/take_screenshots.py).
#
# Phoenix is heavy and pins its own dependencies (SQLAlchemy, grpc, pandas, ...), so it must not share
# the project's venv. The tests find it through TALLYSPAN_PHOENIX_VENV (default below) and skip with a
# clear reason when it is absent. Idempotent: a second run with the venv in place only checks it.
#
# Usage: scripts/install-phoenix.sh            (from anywhere; needs python3 >= 3.10 and network to PyPI)
#        TALLYSPAN_PHOENIX_VENV=/some/dir scripts/install-phoenix.sh
set -euo pipefail

PHOENIX_VERSION="${TALLYSPAN_PHOENIX_VERSION:-20.26.1}"
VENV="${TALLYSPAN_PHOENIX_VENV:-${HOME}/.cache/tallyspan/phoenix-venv}"
PYTHON="${PYTHON:-python3}"

if [ -x "${VENV}/bin/phoenix" ] \
    && "${VENV}/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('arize-phoenix') != '${PHOENIX_VERSION}')" 2>/dev/null; then
    echo "arize-phoenix ${PHOENIX_VERSION} already installed in ${VENV}"
    exit 0
fi

mkdir -p "$(dirname "${VENV}")"
"${PYTHON}" -m venv "${VENV}"
# uv resolves Phoenix's large dependency tree in seconds; fall back to pip where uv is missing.
if command -v uv >/dev/null 2>&1; then
    uv pip install --quiet --python "${VENV}/bin/python" "arize-phoenix==${PHOENIX_VERSION}"
else
    "${VENV}/bin/python" -m pip install --quiet --upgrade pip
    "${VENV}/bin/python" -m pip install --quiet "arize-phoenix==${PHOENIX_VERSION}"
fi
"${VENV}/bin/phoenix" --help >/dev/null
echo "arize-phoenix ${PHOENIX_VERSION} installed in ${VENV}"
