"""Run in aiperf's venv (argv: trace file, tokenizer name, block tokens): aiperf's own Mooncake
loader reads the file and builds its conversations, printed as JSON with each turn's
timing, lengths, extra body and prompt token ids (aiperf's prompt, re-encoded)."""

import json
import sys

from aiperf.common import random_generator as rng
from aiperf.common.tokenizer import Tokenizer
from aiperf.dataset.generator.prompt import PromptGenerator
from aiperf.dataset.loader.mooncake_trace import MooncakeTraceDatasetLoader

rng.init(0)
path, name, block = sys.argv[1], sys.argv[2], int(sys.argv[3])
tok = Tokenizer.from_pretrained(name)
gen = PromptGenerator(prompts=None, prefix_prompts=None, tokenizer=tok)
loader = MooncakeTraceDatasetLoader(filename=path, prompt_generator=gen, default_block_size=block)
conversations = loader.convert_to_conversations(loader.load_dataset())
print(
    json.dumps(
        [
            {
                "session_id": c.session_id,
                "turns": [
                    {
                        "timestamp": t.timestamp,
                        "delay": t.delay,
                        "max_tokens": t.max_tokens,
                        "extra": t.extra_body,
                        "tokens": tok.encode(t.texts[0].contents[0]),
                    }
                    for t in c.turns
                ],
            }
            for c in conversations
        ]
    )
)
