"""The tokenizer directory aiperf gets encodes as the server does: aiperf's own `Tokenizer`,
loaded from the directory in aiperf's venv, gives the ids our GGUF tokenizer gives."""

from __future__ import annotations

import json
from pathlib import Path

from bench.aiperf import env
from bench.aiperf.tokenizer import gguf_tokenizer, write_tokenizer_dir

TEXTS = [
    "Hello, world!",
    "def f(x):\n    return x ** 2  # square\n",
    "In 2024 the 3 cats ate 1234567 fish.",
    "naïve café — 東京 🙂",
    "<|im_start|>user\nlist the files<|im_end|>\n",
    "   leading spaces and\ttabs\n\n\nnewlines",
    "",
]

_AIPERF_SIDE = """
import json, sys
from aiperf.common.tokenizer import Tokenizer
tok = Tokenizer.from_pretrained(sys.argv[1])
print(json.dumps([tok.encode(t) for t in json.loads(sys.argv[2])]))
"""


def test_aiperf_counts_the_tokens_the_server_counts(aiperf_python: Path, tmp_path: Path) -> None:
    folder = write_tokenizer_dir(tmp_path / "tok")
    ours = [gguf_tokenizer().encode(t) for t in TEXTS]
    theirs = json.loads(env.run_python(_AIPERF_SIDE, [str(folder), json.dumps(TEXTS)], 120))
    assert [len(x) for x in theirs] == [len(x) for x in ours]
    assert theirs == ours
    assert sum(map(len, ours)) > 60  # the texts really were tokenized


def test_the_directory_names_the_fast_tokenizer_and_the_chat_template(tmp_path: Path) -> None:
    cfg = json.loads((write_tokenizer_dir(tmp_path / "tok") / "tokenizer_config.json").read_text())
    assert cfg["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert cfg["eos_token"] == "<|im_end|>" and "im_start" in cfg["chat_template"]
    assert cfg["model_max_length"] == 8192
