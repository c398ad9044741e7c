"""The HTTP edge: from strict JSON to streamed tokens, for the OpenAI and Anthropic APIs.

Imports no Ray: `penelope serve` (standalone) runs this room alone.

Modules:
    admission           the count of generation requests in flight (429 past
                        `api.max_pending`), refused before the body while full
    app                 FastAPI app factory; takes its backend as a factory
    auth                bearer keys and `x-api-key` (constant-time) -> tenant
    backend             what the app talks to; ``LocalBackend`` (one in-process engine,
                        replaced when its step loop dies)
    chat_tools          an OpenAI chat request's tools, tool choice, response format and
                        history, checked and planned
    connections         `penelope serve`'s HTTP protocol: a deadline for a silent connection
    generation          one request's engine outputs as text deltas (stop strings), usage,
                        TTFT and ITL
    deadline            per-request deadlines (``api.request_timeout_s``, 504)
    errors              OpenAI error shape and status codes
    hints               a harness's hints: the `penelope` body object, `x-penelope-*`
                        headers, `cache_control`, the session endpoint; what each was granted
    middleware          request bodies: size (413) and stall (408) limits; request counting
    run                 run a request: JSON or SSE, disconnect/timeout/stall -> abort
    prepare             body -> engine request: tokens, sampling, session, tenant, limits
    openai_bodies       OpenAI's chat and text completion bodies and chunks, usage with
                        Penelope's breakdown, SSE framing
    openai_stream       how an API writes a reply (`ReplyShape`); OpenAI's: the finished body,
                        the SSE stream of chunks (tool calls parsed out as they stream)
    sessions            the one rule every API names a request's session by
    schemas             pydantic request bodies (HTTP edge only)
    settings            ``ApiSettings`` and API-key loading
    sglang_probes       SGLang's metadata probes, so that sgl-router can put Penelope
                        workers behind it
    standalone          the app and one engine in one process, no Ray (``penelope serve``)
    textstream          token ids -> text deltas, stop strings
    tools/              tool calls and structured outputs, API-neutral: types, per-model
                        parsers (whole and streaming), chat-template rendering, grammars
    anthropic/          the Anthropic Messages API over the same engine path
    responses_api/      OpenAI's Responses API over the same engine path; stored responses
"""
