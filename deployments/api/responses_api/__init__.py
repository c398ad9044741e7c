"""OpenAI's Responses API over the engine path of the chat and Anthropic routes.

Modules:
    schemas      strict request bodies; the item, part and tool types used, dropped or refused
    translate    to the internal chat request; the session rule; checks naming this API's fields
    replies      the response object, usage, the SSE event sequence
    store        stored responses (store: true) on the Arrow store's filesystem, bounded per
                 tenant (bytes, TTL), counted on /metrics
    input_items  a stored response's input items: their ids, OpenAI's paged list shape
    catalogue    the model's entry in Codex's catalogue (`/v1/models`' `models`)
    routes       `POST /v1/responses`, `GET` and `DELETE /v1/responses/{id}`, its input items
"""
