#!/usr/bin/env bash
# One prepared GPU check (issue 36): one line per check, under 8 minutes on one GPU.
#   bash tests/gpu/run_gpu_checks.sh              every check (needs CUDA and SGLang 0.5.23)
#   bash tests/gpu/run_gpu_checks.sh --cpu-parts  only what runs without a GPU: the SGLang
#                                                 backend's CPU tests (.venv-sglang), and a
#                                                 SKIP line for each CUDA check
# The checks:
#   embedded-bf16   the CUDA embedded engine's bf16 greedy outputs, equal across cache
#                   set-ups (holes, host loads)   -> tests/gpu (pytest -k embedded)
#   sglang-penelope SGLang with --radix-cache-backend penelope, with and without HiCache:
#                   greedy outputs identical to SGLang's default, more cached tokens under
#                   pressure, and the TTFT ratio  -> tests/gpu/test_sglang_penelope.py
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
py="${PYTHON:-python}"
deadline_s=460  # 8 minutes, less start-up

line() { printf '%-16s %-5s %s\n' "$1" "$2" "$3"; }

run_check() {  # name, timeout, command...
    local name=$1 limit=$2; shift 2
    local out
    if out=$(timeout "$limit" "$@" 2>&1); then
        line "$name" PASS "$(echo "$out" | grep -E 'PENELOPE|passed' | tail -1)"
    else
        line "$name" FAIL "$(echo "$out" | tail -3 | tr '\n' ' ')"
    fi
}

if [[ "${1:-}" == "--cpu-parts" ]]; then
    sg="$root/.venv-sglang/bin/python"
    [[ -x "$sg" ]] || sg="$(bash scripts/sglang_env.sh | tail -1)"
    run_check sglang-cpu 600 env OMP_NUM_THREADS=1 "$sg" -m pytest -q -c tests/sglang/pytest.ini tests/sglang
    line embedded-bf16 SKIP "needs CUDA (--cpu-parts)"
    line sglang-penelope SKIP "needs CUDA (--cpu-parts)"
    exit 0
fi

if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    line gpu SKIP "no CUDA device: run with --cpu-parts"
    exit 0
fi
start=$SECONDS
run_check embedded-bf16 200 "$py" -m pytest -q tests/gpu -k "embedded or bf16" -s
left=$((deadline_s - (SECONDS - start)))
run_check sglang-penelope "$left" "$py" -m pytest -q tests/gpu/test_sglang_penelope.py -s
