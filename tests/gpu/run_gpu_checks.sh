#!/usr/bin/env bash
# One prepared GPU check (issue 36, item 5): one line per check, under 8 minutes on one GPU.
#   bash tests/gpu/run_gpu_checks.sh              every check (needs CUDA and SGLang 0.5.23)
#   bash tests/gpu/run_gpu_checks.sh --cpu-parts  only what runs without a GPU: this script's
#                                                 syntax, tests/gpu collected (they skip
#                                                 without CUDA), the SGLang backend's CPU
#                                                 tests (.venv-sglang), and a SKIP line for
#                                                 each CUDA check
# The checks (each line: name, PASS/FAIL/SKIP, its JSON report):
#   embedded-bf16           the CUDA embedded engine's bf16 greedy outputs equal across
#                           cache set-ups (roomy, holes, host loads) with flex attention,
#                           flex equal to the sdpa reference, a pool sized by
#                           device_memory_fraction within its budget
#                           -> tests/gpu/test_embedded_bf16.py
#   transfer-cuda           PageMover's staged host <-> device copies move exactly the named
#                           pages (fp32 and bf16) -> tests/cpu/penelope_engine/tiers/test_transfer.py
#   sglang-penelope         SGLang with --radix-cache-backend penelope, no HiCache: greedy
#                           outputs identical to SGLang's default tree, at least as many
#                           cached prompt tokens under pressure
#   sglang-penelope-hicache the same with --enable-hierarchical-cache (both runs)
#   steps-roofline          the embedded engine's steps against the GPU roofline (issue 49):
#                           decode b1 and the largest batch at 8K, 32K and 100K, a fresh 32K
#                           prefill, a 100K return with a 20K hole; each a fraction of
#                           bench/sim/roofline.py's step time (reported, not asserted; the
#                           target is 0.7) -> penelope bench steps
#   ttft-ratio[-hicache]    a returning turn's median TTFT, penelope / SGLang's default,
#                           under the same memory pressure (JSON; reported, not asserted)
#                           -> tests/gpu/test_sglang_penelope.py (one engine pair per mode)
# PYTHON names the interpreter with the project, torch (CUDA) and SGLang installed.
set -uo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
cd "$root"
py="${PYTHON:-python}"
deadline_s=460  # 8 minutes, less start-up
status=0

line() { printf '%-24s %-5s %s\n' "$1" "$2" "$3"; }

run_check() {  # name, timeout, command...: one line, with the check's PENELOPE JSON
    local name=$1 limit=$2; shift 2
    local out rc
    if ((limit < 30)); then
        line "$name" FAIL "no time left in the ${deadline_s}s budget"
        status=1
        return
    fi
    out=$(timeout -k 10 "$limit" "$@" 2>&1)
    rc=$?
    local report ttft
    report=$(echo "$out" | grep -E '^PENELOPE \{' | tail -1 | cut -d' ' -f2-)
    ttft=$(echo "$out" | grep -E '^PENELOPE_TTFT \{' | tail -1 | cut -d' ' -f2-)
    if ((rc == 0 || rc == 5)) && ! echo "$out" | grep -qE "[0-9]+ passed"; then  # all skipped: say why
        line "$name" SKIP "$(echo "$out" | grep -E '^SKIPPED' | head -1 | sed 's/^SKIPPED \[[0-9]*\] //')"
    elif ((rc == 0)); then
        line "$name" PASS "${report:-$(echo "$out" | grep -E 'passed|skipped' | tail -1)}"
    elif ((rc == 124 || rc == 137)); then
        line "$name" FAIL "timed out after ${limit}s ${report}"
        status=1
    else
        line "$name" FAIL "${report} $(echo "$out" | grep -E '^E ' | head -3 | tr '\n' ' ')"
        [[ -n "$report" ]] || line "$name" FAIL "$(echo "$out" | tail -3 | tr '\n' ' ')"
        status=1
    fi
    if [[ -n "$ttft" ]]; then
        line "ttft-ratio${name#sglang-penelope}" INFO "$ttft"
    fi
}

if [[ "${1:-}" == "--cpu-parts" ]]; then
    if bash -n "${BASH_SOURCE[0]}"; then line syntax PASS "bash -n"; else line syntax FAIL "bash -n"; status=1; fi
    # the venvs of this checkout, or of the main checkout when this is a git worktree
    main_root="$(cd "$(git rev-parse --git-common-dir 2>/dev/null || echo .)/.." && pwd)"
    venv() { for r in "$root" "$main_root"; do [[ -x "$r/$1/bin/python" ]] && { echo "$r/$1/bin/python"; return; }; done; }
    main="${PYTHON:-$(venv .venv)}"
    # without CUDA every tests/gpu module skips itself: pytest's rc 5 (none collected) is a pass
    run_check gpu-tests-collect 120 env OMP_NUM_THREADS=1 bash -c \
        '"$0" -m pytest -q tests/gpu; rc=$?; ((rc == 0 || rc == 5))' "${main:-$py}"
    sg="${SGLANG_PYTHON:-$(venv .venv-sglang)}"
    [[ -n "$sg" ]] || sg="$(bash scripts/sglang_env.sh | tail -1)"
    run_check sglang-cpu 600 env OMP_NUM_THREADS=1 "$sg" -m pytest -c tests/sglang/pytest.ini tests/sglang
    for name in embedded-bf16 transfer-cuda steps-roofline sglang-penelope sglang-penelope-hicache ttft-ratio; do
        line "$name" SKIP "needs CUDA (--cpu-parts)"
    done
    exit "$status"
fi

if ! "$py" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)'; then
    line gpu SKIP "no CUDA device: run with --cpu-parts"
    exit 0
fi
start=$SECONDS
left() { echo $((deadline_s - (SECONDS - start))); }
run_check embedded-bf16 150 "$py" -m pytest -q -s -rs -p no:cacheprovider -o timeout=0 tests/gpu/test_embedded_bf16.py
run_check transfer-cuda 60 "$py" -m pytest -q -rs -p no:cacheprovider -o timeout=0 \
    tests/cpu/penelope_engine/tiers/test_transfer.py
run_check steps-roofline 150 "$py" -m bench.speed.steps --max-batch 8 --steps 8
run_check sglang-penelope $(($(left) / 2)) "$py" -m pytest -q -s -rs -p no:cacheprovider -o timeout=0 \
    tests/gpu/test_sglang_penelope.py -k radix
run_check sglang-penelope-hicache "$(left)" "$py" -m pytest -q -s -rs -p no:cacheprovider -o timeout=0 \
    tests/gpu/test_sglang_penelope.py -k hicache
line total INFO "$((SECONDS - start))s of ${deadline_s}s"
exit "$status"
