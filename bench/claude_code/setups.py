"""The served models `penelope bench claude-code` runs Claude Code against (`--setup`).

A set-up is everything that differs by model: the model's name and window (told to
Claude Code in `CLAUDE_CODE_MAX_CONTEXT_TOKENS`), the device pool, Claude Code's
output cap, the two prompts, Claude Code's own options that shape its prompt, and
the tokenizer that counts shared prefixes. `cli`'s module doc says why each exists.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from penelope_engine.registry import Registry

if TYPE_CHECKING:
    from penelope_engine.tokenizer import Tokenizer


def _smollm2_tokenizer() -> Tokenizer:
    from penelope_engine.model.gguf_loader import converted_dir, find_smollm2_gguf
    from penelope_engine.tokenizer import Tokenizer

    return Tokenizer.from_dir(converted_dir(find_smollm2_gguf()))


def _qwen3_tokenizer() -> Tokenizer:
    from penelope_engine.model.registry import qwen3_tokenizer

    return qwen3_tokenizer()


@dataclass(frozen=True)
class Setup:
    """How one served model meets Claude Code."""

    model: str
    window: int  # the model's context: CLAUDE_CODE_MAX_CONTEXT_TOKENS
    device_pages: int  # two sessions' worth of the window's prompts, with no store
    max_output_tokens: int  # CLAUDE_CODE_MAX_OUTPUT_TOKENS
    prompts: tuple[str, str]
    claude_args: tuple[str, ...]  # Claude Code's own options that shape its prompt
    tokenizer: Callable[[], Tokenizer]
    # the server's temperature for requests that name none (Claude Code names none):
    # 0 makes a run repeatable, so the bench passes or fails the same way every time
    default_temperature: float = 1.0


SETUPS: Registry[Setup] = Registry(
    "Claude Code set-up",
    {
        "smollm2-135m": Setup(
            "smollm2-135m", 8192, 1024, 256,
            ("Say hello to the user in one short sentence.", "Now say goodbye in one sentence."),
            ("--bare",),
            _smollm2_tokenizer,
            default_temperature=0.0,
        ),
        "tiny-qwen3-64k": Setup(
            "tiny-qwen3-64k", 65536, 4096, 32,
            ("List the files in this directory.", "Now say which one is largest."),
            (), _qwen3_tokenizer,
        ),
    },
)  # fmt: skip
