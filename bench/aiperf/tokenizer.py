"""A Hugging Face tokenizer directory written from the bundled GGUF's own tokenizer.

aiperf counts and synthesises prompt tokens with a Hugging Face tokenizer
(`AutoTokenizer.from_pretrained`); no hub is reachable here, so it gets one
built from the same GGUF metadata the server reads
(`penelope_engine.model.gguf_tokenizer`): `tokenizer.json` and a
`tokenizer_config.json` naming `PreTrainedTokenizerFast`, the BOS/EOS tokens
and the chat template. Only the metadata is read, not the weights.

A plain directory is enough for `aiperf profile --tokenizer DIR` on synthetic
prompts, but aiperf 0.13's trace replay decodes hash-id blocks in worker
processes that force `HF_HUB_OFFLINE=1`, and offline it only looks names up in
the hub cache (a local path fails there). So `hub_cache` also lays the files
out as a hub cache entry (`HUB_NAME` under `HF_HOME`): with `hub_env`, every
aiperf process finds it offline by name.

    python -m bench.aiperf.tokenizer OUT_DIR              a plain directory
    python -m bench.aiperf.tokenizer --hub-home HF_HOME   the hub cache entry (prints its name)
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from penelope_engine.model.gguf_tokenizer import tokenizer_from_gguf
from penelope_engine.tokenizer import Tokenizer

MAX_LENGTH = 8192  # SmolLM2-135M's training context, for tokenizer_config's model_max_length
HUB_NAME = "penelope/smollm2-135m-gguf-tokenizer"
_REVISION = "0" * 40  # the hub cache's snapshot name; refs/main points at it


def gguf_tokenizer(gguf: Path | None = None) -> Tokenizer:
    """The tokenizer of `gguf` (default: the bundled SmolLM2-135M), from its metadata."""
    from gguf import GGUFReader

    from penelope_engine.model.gguf_loader import find_smollm2_gguf

    reader = GGUFReader(str(gguf or find_smollm2_gguf()))
    meta = {k: f.contents() for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    return tokenizer_from_gguf(meta)


def write_tokenizer_dir(out: Path, gguf: Path | None = None) -> Path:
    """Write the tokenizer directory `out` (idempotent) and return it."""
    tok = gguf_tokenizer(gguf)
    tok.save(out)
    cfg = out / "tokenizer_config.json"
    fields = json.loads(cfg.read_text())
    cfg.write_text(json.dumps({**fields, "model_max_length": MAX_LENGTH}, indent=2))
    return out


def hub_cache(hf_home: Path, gguf: Path | None = None) -> str:
    """Write the tokenizer as `HUB_NAME`'s entry in the hub cache under `hf_home`; its name."""
    entry = hf_home / "hub" / f"models--{HUB_NAME.replace('/', '--')}"
    write_tokenizer_dir(entry / "snapshots" / _REVISION, gguf)
    (entry / "refs").mkdir(parents=True, exist_ok=True)
    (entry / "refs" / "main").write_text(_REVISION)
    return HUB_NAME


def hub_env(hf_home: Path) -> dict[str, str]:
    """The environment in which aiperf finds `hub_cache`'s entry, offline."""
    return {"HF_HOME": str(hf_home), "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) == 2 and args[0] == "--hub-home":
        print(hub_cache(Path(args[1])))
    elif len(args) == 1 and not args[0].startswith("-"):
        print(write_tokenizer_dir(Path(args[0])))
    else:
        print(__doc__, file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
