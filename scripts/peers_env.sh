#!/usr/bin/env bash
# Set up .venv-peers, the venv in which the checks against the peers' real code run
# (Dynamo's SelectionService, sgl-router's binary: tests/cpu/bench/peers), when it is
# missing or stale; a no-op when it is ready. Its own venv: ai-dynamo-runtime pins a
# pydantic older than the project's. About 30 s from PyPI.
#
# Usage: scripts/peers_env.sh            (prints the venv's python path last)
#        PEERS_VENV=/path scripts/peers_env.sh
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${PEERS_VENV:-$root/.venv-peers}"
reqs="$root/tests/cpu/bench/peers/requirements-real.txt"
stamp="$venv/.penelope-ready"
python_bin="${PYTHON:-python3}"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/python" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

echo "peers_env: building $venv" >&2
rm -rf "$venv"
"$python_bin" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install -r "$reqs"
"$venv/bin/python" -c "import dynamo.llm, sglang_router, zmq, msgpack"
echo "$want" > "$stamp"
echo "$venv/bin/python"
