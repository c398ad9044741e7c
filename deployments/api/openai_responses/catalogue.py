"""The model's entry in Codex's model catalogue, served beside `data` in `/v1/models`.

Codex asks `GET /v1/models?client_version=...` and reads a `models` array of
catalogue entries (its `ModelInfo`); without an entry for the model it warns
"Model metadata ... not found" and assumes defaults (a window far larger than
a small model's). The entry says what this server does: the served model's
context window, text only, parallel function calls, the shell as a plain
function tool and `apply_patch` as a function (Penelope skips `custom`
tools), no reasoning summaries, no verbosity, no websockets. `model_messages`
is null, so Codex uses its own default instructions.
"""

from __future__ import annotations

from typing import Any

COMPACT_AT = 0.9  # Codex compacts the history past this share of the window


def model_catalogue(model: str, context_window: int) -> dict[str, Any]:
    return {
        "slug": model,
        "display_name": model,
        "description": f"{model}, served by Penelope.",
        "context_window": context_window,
        "max_context_window": context_window,
        "auto_compact_token_limit": int(context_window * COMPACT_AT),
        "default_reasoning_level": "medium",
        "supported_reasoning_levels": [
            {"effort": "medium", "description": "The model's own reasoning, if any"}
        ],
        "default_reasoning_summary": "none",
        "supports_reasoning_summaries": False,
        "supports_reasoning_summary_parameter": False,
        "supports_reasoning_effort_updates": False,
        "shell_type": "shell_command",
        "apply_patch_tool_type": "function",
        "web_search_tool_type": "text_and_image",
        "supports_search_tool": False,
        "supports_parallel_tool_calls": True,
        "input_modalities": ["text"],
        "supports_image_detail_original": False,
        "truncation_policy": {"mode": "tokens", "limit": 10000},
        "support_verbosity": False,
        "default_verbosity": None,
        "prefer_websockets": False,
        "use_responses_lite": False,
        "tool_mode": None,
        "multi_agent_version": None,
        "experimental_supported_tools": [],
        "include_skills_usage_instructions": False,
        "include_apps_usage_instructions": False,
        "include_plugin_usage_instructions": False,
        "node_repl_auto_review_required": False,
        "node_repl_disabled": True,
        "auto_review_model_override": None,
        "model_specialty": None,
        "model_messages": None,
        "comp_hash": "0",
        "visibility": "list",
        "minimal_client_version": "0.0.0",
        "supported_in_api": True,
        "availability_nux": None,
        "upgrade": None,
        "priority": 1,
        "available_in_plans": [],
        "default_service_tier": None,
        "service_tiers": [],
        "additional_speed_tiers": [],
    }
