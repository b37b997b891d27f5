#!/usr/bin/env bash
# Installs hyperloom and its test dependencies into .venv (made next to this file).
# A torch that is already installed system-wide (a CUDA machine's) is kept; otherwise the CPU
# build torch==2.13.0 is installed by version from the package index.
set -euo pipefail
cd "$(dirname "$0")"
PY=${PYTHON:-python3}
[ -x .venv/bin/python ] || "$PY" -m venv --system-site-packages .venv
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
    .venv/bin/python -m pip install -q "torch==2.13.0"
fi
.venv/bin/python -m pip install -q -e ".[test]"
