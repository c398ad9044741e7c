"""The Anthropic Messages API over the engine path of the OpenAI routes.

`schemas` (strict request bodies), `session` (which session a request
is, Claude Code's attribution block), `translate` (to the internal chat
request), `replies` (bodies, usage, SSE events), `errors` (the error shape),
`routes` (the two routes).
"""
