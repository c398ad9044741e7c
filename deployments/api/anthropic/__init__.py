"""The Anthropic Messages API over the engine path of the OpenAI routes.

Modules:
    schemas      strict request bodies (a 400 names the field)
    session      which session a request is; Claude Code's attribution block
    translate    to the internal chat request of the OpenAI path
    replies      bodies, usage, SSE events
    errors       Anthropic's error shape
    routes       `/v1/messages` and `/v1/messages/count_tokens`
"""
