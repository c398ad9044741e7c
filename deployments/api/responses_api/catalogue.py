"""The model's entry in Codex's model catalogue, served beside `data` in `/v1/models`.

Codex asks `GET /v1/models?client_version=...` and reads a `models` array of
catalogue entries (its `ModelInfo`); without an entry for the model it warns
"Model metadata ... not found" and assumes defaults (a window far larger than
a small model's). The entry says what this server does: the served model's
context window, text only, parallel function calls, no reasoning summaries,
no verbosity, no websockets, and short base instructions (`INSTRUCTIONS`, in
`model_messages.instructions_template`) that leave a small model's window for
the conversation; Codex's `model_instructions_file` replaces them. Codex
0.171 accepts only `freeform` for `apply_patch_tool_type`: its `apply_patch`
then comes as a `custom` tool, which this server skips (the model edits
files through the shell tool).
"""

from __future__ import annotations

from typing import Any

COMPACT_AT = 0.9  # Codex compacts the history past this share of the window
INSTRUCTIONS = (
    "You are Codex, a coding agent running in a terminal on the user's machine. Use the "
    "tools you are given to read files and run commands in the workspace when the task "
    "needs it. Be precise and brief: answer in a few sentences, and end your turn when "
    "the task is done."
)


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
        "apply_patch_tool_type": "freeform",
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
        "model_messages": {"instructions_template": INSTRUCTIONS},
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
