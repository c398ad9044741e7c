"""Tokenizer: a `tokenizers.Tokenizer` plus the chat template and end-of-sequence ids.

The chat template is rendered with jinja2 the way Hugging Face renders it
(sandboxed, ``trim_blocks``/``lstrip_blocks``, ``loopcontrols``, a ``tojson``
filter and ``raise_exception``), then encoded without adding special tokens.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from datetime import datetime
from functools import cached_property
from pathlib import Path
from typing import Any

import jinja2
import tokenizers
from jinja2.ext import loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

from penelope_engine.errors import ConfigError, InvalidRequestError


class Tokenizer:
    """Encodes text, decodes ids and renders chat prompts for one model."""

    def __init__(
        self,
        backend: tokenizers.Tokenizer,
        eos_token_ids: Sequence[int],
        chat_template: str | None = None,
        bos_token: str | None = None,
        eos_token: str | None = None,
    ) -> None:
        if not eos_token_ids:
            raise ConfigError("a tokenizer needs at least one end-of-sequence id")
        self.backend = backend
        self.eos_token_ids = tuple(eos_token_ids)
        self.chat_template = chat_template
        self.bos_token = bos_token
        self.eos_token = eos_token

    @classmethod
    def from_dir(cls, path: str | Path) -> Tokenizer:
        """Load ``tokenizer.json`` with ``tokenizer_config.json`` and ``generation_config.json``."""
        root = Path(path)
        if not (root / "tokenizer.json").is_file():
            raise ConfigError(f"{root} has no tokenizer.json")
        backend = tokenizers.Tokenizer.from_file(str(root / "tokenizer.json"))
        cfg = _read_json(root / "tokenizer_config.json")
        bos, eos = _token_text(cfg.get("bos_token")), _token_text(cfg.get("eos_token"))
        eos_ids = _eos_ids(backend, eos, _read_json(root / "generation_config.json"))
        template = cfg.get("chat_template")
        if template is None and (root / "chat_template.jinja").is_file():
            template = (root / "chat_template.jinja").read_text()
        return cls(backend, eos_ids, template, bos, eos)

    def save(self, path: str | Path) -> None:
        """Write ``tokenizer.json`` and ``tokenizer_config.json`` that `from_dir` reads back."""
        root = Path(path)
        root.mkdir(parents=True, exist_ok=True)
        self.backend.save(str(root / "tokenizer.json"))
        config = {
            "tokenizer_class": "PreTrainedTokenizerFast",
            "bos_token": self.bos_token,
            "eos_token": self.eos_token,
            "chat_template": self.chat_template,
            "add_bos_token": False,
            "clean_up_tokenization_spaces": False,
        }
        (root / "tokenizer_config.json").write_text(json.dumps(config, indent=2))

    def with_eos_tokens(self, *tokens: str) -> Tokenizer:
        """A copy that also stops at `tokens` (for example ``<|endoftext|>``)."""
        ids = list(self.eos_token_ids)
        for token in tokens:
            token_id = self.backend.token_to_id(token)
            if token_id is None:
                raise ConfigError(f"{token!r} is not in the vocabulary")
            if token_id not in ids:
                ids.append(token_id)
        return Tokenizer(self.backend, ids, self.chat_template, self.bos_token, self.eos_token)

    @property
    def vocab_size(self) -> int:
        return int(self.backend.get_vocab_size(with_added_tokens=True))

    @cached_property
    def added_tokens(self) -> frozenset[str]:
        """The vocabulary's added tokens (``<|im_end|>``, Qwen's ``<tool_call>``...)."""
        return frozenset(t.content for t in self.backend.get_added_tokens_decoder().values())

    def encode(self, text: str) -> list[int]:
        return list(self.backend.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return str(self.backend.decode(list(ids), skip_special_tokens=skip_special_tokens))

    def render_chat(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_vars: Any,
    ) -> str:
        """The chat template applied to `messages`, as text."""
        if not messages:
            raise InvalidRequestError("a chat needs at least one message")
        return self._template.render(
            messages=list(messages),
            add_generation_prompt=add_generation_prompt,
            bos_token=self.bos_token or "",
            eos_token=self.eos_token or "",
            **template_vars,
        )

    def apply_chat_template(
        self,
        messages: Sequence[Mapping[str, Any]],
        add_generation_prompt: bool = True,
        **template_vars: Any,
    ) -> list[int]:
        """Token ids of the rendered chat (special tokens in the text are encoded as such)."""
        return self.encode(self.render_chat(messages, add_generation_prompt, **template_vars))

    @cached_property
    def _template(self) -> jinja2.Template:
        if not self.chat_template:
            raise ConfigError("this tokenizer has no chat template; send plain completions")
        env = ImmutableSandboxedEnvironment(
            trim_blocks=True, lstrip_blocks=True, extensions=[loopcontrols]
        )
        env.filters["tojson"] = _tojson
        env.globals["raise_exception"] = _raise_template_error
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        return env.from_string(self.chat_template)


def _tojson(
    value: Any,
    ensure_ascii: bool = False,
    indent: int | None = None,
    separators: tuple[str, str] | None = None,
    sort_keys: bool = False,
) -> str:
    return json.dumps(
        value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
    )


def _raise_template_error(message: str) -> None:
    raise InvalidRequestError(f"chat template: {message}")


def _read_json(path: Path) -> dict[str, Any]:
    return dict(json.loads(path.read_text())) if path.is_file() else {}


def _token_text(token: Any) -> str | None:
    """A special token as tokenizer_config.json writes it: a string or an AddedToken dict."""
    if isinstance(token, dict):
        return str(token.get("content"))
    return None if token is None else str(token)


def _eos_ids(backend: tokenizers.Tokenizer, eos: str | None, gen: dict[str, Any]) -> list[int]:
    ids: list[int] = []
    configured = gen.get("eos_token_id")
    if isinstance(configured, int):
        ids.append(configured)
    elif isinstance(configured, list):
        ids.extend(int(i) for i in configured)
    eos_id = backend.token_to_id(eos) if eos else None
    if eos_id is not None and eos_id not in ids:
        ids.append(eos_id)
    return ids
