"""What the real-client tool tests share: SmolLM2 served standalone, tools, and checks."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI

from penelope_engine.config import CacheConfig, EngineConfig, SchedulerConfig

SMOLLM2 = "smollm2-135m"  # the bundled real model: its template has no tools (the fallback)
SMOLLM2_ENGINE = EngineConfig(
    model=SMOLLM2,
    cache=CacheConfig(page_size=8, device_pages=512),
    scheduler=SchedulerConfig(max_batch_tokens=512, prefill_chunk=256, max_running=8),
)
WEATHER_PARAMS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "minLength": 1, "maxLength": 24},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The current weather of a city.",
        "parameters": WEATHER_PARAMS,
    },
}
SYSTEM = "You are a weather assistant. Call get_weather to answer questions about weather."


def wait_idle(app: FastAPI, timeout_s: float = 10.0) -> None:
    """Until the engine runs nothing, then check that no page leaked."""
    engine = app.state.penelope.backend.engine
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        stats = engine.stats()
        if stats.running == 0 and stats.queue_length == 0:
            engine.check_integrity()
            return
        time.sleep(0.05)
    raise AssertionError(f"engine still busy: {engine.stats()}")
