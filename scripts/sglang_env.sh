#!/usr/bin/env bash
# Set up .venv-sglang, the separate virtual environment for the SGLang backend's tests
# (tests/sglang), when it is missing or stale; a no-op when it is ready.
#
# The recipe follows shared/sglang-cpu/README.md: the CPU build of torch 2.13.0 from this
# disk first, then SGLang 0.5.23 and what its cache and test kit import, with --no-deps so
# that pip pulls no CUDA packages. torchvision is not installed: tests/sglang/stubs holds a
# stand-in that the tests put on sys.path.
#
# Usage: scripts/sglang_env.sh            (prints the venv's python path last)
#        SGLANG_VENV=/path scripts/sglang_env.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${SGLANG_VENV:-$root/.venv-sglang}"
reqs="$root/tests/sglang/requirements.txt"
stamp="$venv/.penelope-ready"
python_bin="${PYTHON:-python3}"

want_stamp() {
    # The venv is ready when it was built from this exact requirements file.
    sha256sum "$reqs" | cut -d' ' -f1
}

if [[ -f "$stamp" && "$(cat "$stamp")" == "$(want_stamp)" && -x "$venv/bin/python" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

echo "sglang_env: building $venv (about 2-4 minutes)" >&2
rm -rf "$venv"
"$python_bin" -m venv "$venv"
pip=("$venv/bin/python" -m pip --disable-pip-version-check -q)
"${pip[@]}" install torch==2.13.0
"${pip[@]}" install --no-deps -r "$reqs"
"$venv/bin/python" - <<'EOF'
import torch

assert torch.__version__.startswith("2.13.0"), f"expected torch 2.13.0, got {torch.__version__}"
assert not torch.version.cuda, "a CUDA build of torch was installed; expected the CPU build"
EOF
want_stamp >"$stamp"
echo "$venv/bin/python"
