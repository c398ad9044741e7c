"""The engine and transformers checks of `penelope verify` (the fused one: verify_fused.py).

Engine: sessions run round-robin through the real `Engine` on a tight device
pool, a smaller host tier and an Arrow store (temp dir) whose budget holds only
part of what spills: pages are demoted, loaded back from host and store, and
lost (holes). Each turn also runs from scratch on a fresh engine that holds it
all; greedy tokens and the logits behind them (`LogitsTap`) must match.

Reference: transformers builds the model from the same checkpoint itself (the
GGUF file for smollm2-135m, our state dict for the random tiny models).
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from penelope_cli.closeness import agreement, max_abs_diff, passes, verdict, worst
from penelope_engine.config import CacheConfig, DType, EngineConfig, ModelConfig
from penelope_engine.core import BenchHooks
from penelope_engine.engine import Engine
from penelope_engine.model.attention import build_metadata
from penelope_engine.model.registry import LoadedModel
from penelope_engine.protocol import GenerateRequest, SamplingParams
from penelope_engine.sched.sequence import BatchItem
from penelope_engine.tiers.kv_pool import KVPool
from penelope_engine.util import cdiv

TIERS = ("device", "host", "store", "recomputed", "new")
FORMED = ("turns_with_holes", "turns_with_host_loads", "turns_with_store_loads")


class LogitsTap:
    """Records the logits row behind every token an engine's runner samples: the engine's
    `BenchHooks.on_logits`, given at its construction. The row of item i is the forward's
    row i (one per item), or, if the model returns rows only for items that sample, the
    next such row."""

    def __init__(self) -> None:
        self.rows: dict[str, list[torch.Tensor]] = {}

    def __call__(
        self, items: list[BatchItem], logits: torch.Tensor, tokens: list[int | None]
    ) -> None:
        wants = [i for i, it in enumerate(items) if it.wants_token]
        if len(logits) not in (len(items), len(wants)):
            raise RuntimeError(f"{len(logits)} logits rows for {len(items)} batch items")
        sampled = [i for i, tok in enumerate(tokens) if tok is not None]
        rows = sampled if len(logits) == len(items) else [wants.index(i) for i in sampled]
        for i, row in zip(sampled, rows):
            self.rows.setdefault(items[i].seq.request_id, []).append(logits[row].cpu())


def _sessions(
    rng: np.random.Generator, vocab: int, page_size: int, sessions: int, turns: int
) -> tuple[list[list[int]], list[list[list[int]]]]:
    """First prompts (a prefix shared off a page boundary, then private history) and the new
    tokens each turn appends after the reply."""

    def draw(n: int) -> list[int]:
        return [int(t) for t in rng.integers(0, vocab, n)]

    shared = draw(2 * page_size + 3)
    first = [shared + draw(page_size * int(rng.integers(3, 7)) + 5) for _ in range(sessions)]
    new = [[draw(int(rng.integers(2, 2 * page_size))) for _ in range(turns)] for _ in first]
    return first, new


def tight_cache(lengths: list[int], page_size: int, store_uri: str, kv_bytes: int) -> CacheConfig:
    """Of the sessions' pages: a device pool of 1/3 (at least the longest session), a host tier
    of 1/2 (it also holds copies of device pages) and a store of 1/8, reached by spills only."""
    pages = [cdiv(n, page_size) for n in lengths]
    working, floor = sum(pages), max(pages) + 2
    device, host = max(floor, working // 3), max(floor, working // 2)
    store_bytes = max(1, working // 8) * page_size * kv_bytes
    return CacheConfig(
        page_size=page_size, device_pages=device, host_pages=host, policy="penelope",
        store_uri=store_uri, store_bytes=store_bytes, write_behind_bytes=0,
    )  # fmt: skip


def run_engine(
    lm: LoadedModel,
    model: str,
    dtype: DType,
    device: str,
    page_size: int,
    sessions: int,
    turns: int,
    max_tokens: int,
    seed: int,
    tolerance: float,
    attention: str = "auto",
) -> tuple[dict, list[tuple[list[int], int, list[torch.Tensor]]]]:
    """Run the sessions on a tight cache with the `attention` backend and each turn from
    scratch with the reference backend (`sdpa`); the report and, per turn, (full sequence,
    prompt length, the tight engine's sampled rows) for the reference."""
    rng = np.random.default_rng(seed)
    history, new = _sessions(rng, lm.config.vocab_size, page_size, sessions, turns)
    lengths = [len(h) + sum(len(x) for x in n) + turns * max_tokens for h, n in zip(history, new)]
    sampling = SamplingParams(max_tokens=max_tokens, ignore_eos=True)
    kv_bytes = lm.config.kv_bytes_per_token(torch.finfo(lm.model.dtype).bits // 8)
    report: dict[str, Any] = {"sessions": sessions, "turns": sessions * turns}
    counts = dict.fromkeys(FORMED, 0)
    diffs, mismatched, turns_out, agree, rows_seen, kls = [], [], [], 0, 0, list[float]()
    with tempfile.TemporaryDirectory() as store_dir:
        cache = tight_cache(lengths, page_size, store_dir, kv_bytes)
        engine, tap = _engine(lm, model, dtype, device, cache, attention)
        for t in range(turns):
            for s in range(sessions):
                rid = f"s{s}-t{t}"
                prompt = tuple(history[s])
                out = engine.generate_sync(GenerateRequest(rid, prompt, sampling, f"s{s}"))
                engine.check_integrity()
                u = out.usage
                for k, n in zip(FORMED, (u.recomputed_tokens, u.host_tokens, u.store_tokens)):
                    counts[k] += n > 0
                ref = GenerateRequest(rid, prompt, sampling)
                ref_tokens, ref_rows = _from_scratch(lm, model, dtype, device, page_size, ref)
                rows = tap.rows.pop(rid, [])
                if out.token_ids != ref_tokens:
                    mismatched.append(rid)
                diffs.append(max_abs_diff(_stack(rows), _stack(ref_rows)))
                turn_agree, turn_rows, kl = agreement(_stack(rows), _stack(ref_rows))
                agree, rows_seen, kls = agree + turn_agree, rows_seen + turn_rows, [*kls, kl]
                turns_out.append((list(prompt) + list(out.token_ids), len(prompt), rows))
                history[s] = list(prompt) + list(out.token_ids) + new[s][t]
        stats = engine.stats()
    # exact to `tolerance` in float32; int8 and int4 decode rows and 16-bit models: the stated bound
    exact = lm.model.dtype == torch.float32 and lm.model.weights == "float"
    judged = verdict(exact, worst(diffs), tolerance, agree, rows_seen, worst(kls))
    formed = all(counts.values())
    report |= {
        "device_pages": cache.device_pages,
        "host_pages": cache.host_pages,
        "store_bytes": cache.store_bytes,
        **counts,
        "tokens": {k: getattr(stats.tokens, f"{k}_tokens") for k in TIERS},
        "tokens_exact": not mismatched,
        "mismatched_turns": mismatched,
        **judged,
        "ok": formed and judged["ok"] and (not mismatched or not exact),
    }
    if not formed:
        lacking = " or ".join(k[11:].replace("_", " ") for k, n in counts.items() if not n)
        report["error"] = f"no turn had {lacking}: not a test (raise --sessions or --turns)"
    return report, turns_out


def _engine(
    lm: LoadedModel,
    model: str,
    dtype: DType,
    device: str,
    cache: CacheConfig,
    attention: str = "sdpa",
) -> tuple[Engine, LogitsTap]:
    tap = LogitsTap()
    config = EngineConfig(model=model, device=device, dtype=dtype, cache=cache,
                          attention=attention, weights=lm.model.weights)  # fmt: skip
    return Engine(config, lm, bench=BenchHooks(on_logits=tap)), tap


def _stack(rows: list[torch.Tensor]) -> torch.Tensor:
    return torch.stack(rows) if rows else torch.empty(0)


def _from_scratch(
    lm: LoadedModel, model: str, dtype: DType, device: str, page_size: int, req: GenerateRequest
) -> tuple[tuple[int, ...], list[torch.Tensor]]:
    """One request on a fresh engine whose device pool holds it all (no host, no store)."""
    pages = cdiv(len(req.prompt_token_ids) + req.sampling.max_tokens, page_size) + 1
    cache = CacheConfig(page_size=page_size, device_pages=pages, host_pages=0)
    engine, tap = _engine(lm, model, dtype, device, cache)
    out = engine.generate_sync(req)
    return out.token_ids, tap.rows.pop(req.request_id, [])


# -- transformers ---------------------------------------------------------------------------
def _no_init() -> Any:
    """A context that skips transformers' random weight init (the weights are loaded next)."""
    try:
        from transformers.initialization import no_init_weights  # transformers >= 5
    except ImportError:
        from transformers.modeling_utils import no_init_weights  # type: ignore
    return no_init_weights()


def hf_from_state_dict(lm: LoadedModel) -> torch.nn.Module:
    """The transformers model of our architecture holding our weights (the tiny models)."""
    from transformers import LlamaConfig, LlamaForCausalLM, Qwen3Config, Qwen3ForCausalLM

    cfg: ModelConfig = lm.config
    common: dict[str, Any] = dict(
        vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size,
        intermediate_size=cfg.intermediate_size, num_hidden_layers=cfg.num_layers,
        num_attention_heads=cfg.num_heads, num_key_value_heads=cfg.num_kv_heads,
        head_dim=cfg.head_dim, max_position_embeddings=cfg.max_position,
        rope_theta=cfg.rope_theta, rms_norm_eps=cfg.rms_norm_eps,
        tie_word_embeddings=cfg.tie_word_embeddings,
    )  # fmt: skip
    with _no_init():
        if cfg.arch == "qwen3":
            hf: torch.nn.Module = Qwen3ForCausalLM(Qwen3Config(**common))
        else:
            hf = LlamaForCausalLM(LlamaConfig(**common))
    state = {k: v.detach().float().cpu() for k, v in lm.model.state_dict().items()}
    hf.load_state_dict(state, strict=True)
    return hf.eval()


def hf_from_gguf(path: Path) -> torch.nn.Module:
    """transformers' own GGUF loader: its dequantization, names and rotary un-permutation."""
    from transformers import AutoConfig, AutoModelForCausalLM

    folder, name = str(path.parent), path.name
    try:
        hf = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
        return hf.eval()
    except ValueError as exc:  # from_pretrained wants `accelerate` for GGUF files
        if "accelerate" not in str(exc):
            raise
    from transformers.modeling_gguf_pytorch_utils import load_gguf_checkpoint

    with _no_init():
        hf = AutoModelForCausalLM.from_config(
            AutoConfig.from_pretrained(folder, gguf_file=name), dtype=torch.float32
        )
    tensors = load_gguf_checkpoint(str(path), return_tensors=True, model_to_load=hf)["tensors"]
    missing, unexpected = hf.load_state_dict(tensors, strict=False)
    tied = {"lm_head.weight"} if hf.config.tie_word_embeddings else set()
    if set(missing) - tied or unexpected:
        raise RuntimeError(f"GGUF tensors do not fit: missing {missing}, unexpected {unexpected}")
    hf.tie_weights()
    return hf.eval()


def transformers_model(model: str, lm: LoadedModel) -> torch.nn.Module:
    if model == "smollm2-135m":
        from penelope_engine.model.gguf_loader import find_smollm2_gguf

        return hf_from_gguf(find_smollm2_gguf())
    if model.startswith("tiny-"):
        return hf_from_state_dict(lm)
    from transformers import AutoModelForCausalLM  # a checkpoint directory

    return AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()


def run_reference(
    lm: LoadedModel,
    model: str,
    page_size: int,
    turns: list[tuple[list[int], int, list[torch.Tensor]]],
    tolerance: float,
    make_hf: Callable[[str, LoadedModel], torch.nn.Module] = transformers_model,
) -> dict:
    """Logits of transformers vs our full prefill at every page boundary and every sampled
    position of each turn, and vs the tight engine's own sampled rows."""
    hf = make_hf(model, lm)
    diffs, agree, positions = [], 0, 0
    for tokens, prompt_len, rows in turns:
        seq = tokens[:-1]  # the last token was sampled, never fed
        sampled = list(range(prompt_len - 1, len(seq)))
        where = sorted(set(range(page_size - 1, len(seq), page_size)) | set(sampled))
        with torch.no_grad():
            ref = hf(torch.tensor([seq]), logits_to_keep=torch.tensor(where)).logits[0].float()
        ours = _full_prefill(lm, seq, where, page_size)
        diffs.append(max_abs_diff(ours, ref))
        at = torch.tensor([where.index(p) for p in sampled])
        if rows:
            diffs.append(max_abs_diff(_stack(rows), ref[at]))
        agree += int((ours.argmax(-1) == ref.argmax(-1)).sum())
        positions += len(where)
    diff = worst(diffs)
    return {
        "library": "transformers",
        "sequences": len(turns),
        "positions": positions,
        "argmax_agreement": agree / positions if positions else 0.0,
        "max_abs_diff": diff,
        "ok": bool(turns) and passes(diff, tolerance),
    }


def _full_prefill(lm: LoadedModel, seq: list[int], rows: list[int], page_size: int) -> torch.Tensor:
    """Our decoder over the whole sequence in one pass, on a shuffled page table."""
    pages = cdiv(len(seq), page_size)
    device = lm.model.device
    kv = KVPool(lm.config, pages, page_size, lm.model.dtype, device)
    table = torch.randperm(pages, generator=torch.Generator().manual_seed(pages))
    meta = build_metadata([list(range(len(seq)))], [table], [len(seq)], page_size, True, device)
    meta = replace(meta, logits_indices=torch.tensor(rows, device=device))
    return lm.model(torch.tensor(seq, device=device), meta, kv).cpu()
