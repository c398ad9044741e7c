#!/usr/bin/env bash
# Set up .venv-aiperf, the venv of NVIDIA's aiperf benchmark client (issue 61), when it is
# missing or stale; a no-op when it is ready. Its own venv: aiperf brings transformers,
# pandas, pyarrow and pins that the product must not share. About 1-2 min from PyPI, 1.2 GB.
#
# Usage: scripts/aiperf_env.sh [install]   (prints the venv's python path last)
#        AIPERF_VENV=/path scripts/aiperf_env.sh install
# Then: penelope bench export-trace / penelope bench aiperf (docs/aiperf.md).
set -euo pipefail

case "${1:-install}" in
    install) ;;
    *) sed -n '2,8p' "$0"; exit 2 ;;
esac

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
venv="${AIPERF_VENV:-$root/.venv-aiperf}"
reqs="$root/bench/aiperf/requirements.txt"
stamp="$venv/.penelope-ready"
python_bin="${PYTHON:-python3}"
want="$(sha256sum "$reqs" | cut -d' ' -f1)"

if [[ -f "$stamp" && "$(cat "$stamp")" == "$want" && -x "$venv/bin/aiperf" ]]; then
    echo "$venv/bin/python"
    exit 0
fi

echo "aiperf_env: building $venv" >&2
rm -rf "$venv"
"$python_bin" -m venv "$venv"
"$venv/bin/python" -m pip --disable-pip-version-check -q install -r "$reqs"
# The loader, the analyzer and the tokenizer stack the bench and its tests import.
"$venv/bin/python" - "$reqs" <<'PY'
import re
import sys
from importlib.metadata import version

import transformers  # noqa: F401  (aiperf tokenizes with it)
from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader  # noqa: F401
from aiperf.dataset.synthesis.prefix_analyzer import PrefixAnalyzer  # noqa: F401

want = re.search(r"^aiperf==(\S+)", open(sys.argv[1]).read(), re.M).group(1)
got = version("aiperf")
assert got == want, f"expected aiperf {want}, got {got}"
PY
echo "$want" > "$stamp"
echo "$venv/bin/python"
