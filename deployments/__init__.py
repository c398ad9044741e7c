"""Serving: the OpenAI-compatible API, standalone mode and the Ray Serve application.

Modules that import Ray (``engine_replica``, ``ingress``, ``builder``) are not
imported here, so standalone mode never loads Ray.

Modules:
    api                 FastAPI app factory; takes its backend as a factory
    auth                bearer keys (constant-time) -> tenant
    autoscaling         KV pressure signals; ``autoscaling_policy`` the Ray policy class
    autoscaling_policy  The Ray Serve custom autoscaling policy:
                        `deployments.autoscaling_policy:KvAwarePolicy`
    backend             what the app talks to; ``LocalBackend`` (one in-process engine,
                        replaced when its step loop dies)
    tools/              tool calling and structured outputs, API-neutral: tool types, reply
                        parsers (hermes, llama3_json; whole and streaming), chat-template
                        rendering with tools, llguidance output constraints
    chat_tools          an OpenAI chat request's tools, tool_choice, response_format and
                        tool history, checked (400s) and planned
    builder             pure builder: ``ServeConfig`` -> Ray Serve ``Application``
    completions         run a request: admission (429), JSON or SSE, disconnect/timeout ->
                        abort
    deadline            per-request deadlines (``api.request_timeout_s``, 504)
    engine_replica      engine deployment: generate, record_routing_stats,
                        record_autoscaling_stats
    errors              OpenAI error shape and status codes
    hints               a harness's hints: the `penelope` body object, `x-penelope-*`
                        headers, `cache_control`; what each was granted
    ingress             ingress deployment and ``RayBackend`` (handle + cache-affinity
                        router)
    launch              `make run`: serve a config on a local Ray of its own, or fail within
                        seconds saying why
    metrics             Prometheus: engine stats per replica, TTFT/ITL histograms
    middleware          body-size limit (413), request counting
    prepare             body -> engine request: tokens, sampling, session, tenant, limits
    replica_stats       Which engine replicas are up, and their latest `EngineStats`, as the
                        ingress knows them
    responses           OpenAI response bodies, usage with Penelope's breakdown, SSE framing
    schemas             pydantic request bodies (HTTP edge only)
    serve_config        the Ray application's config (YAML ``args`` -> frozen dataclasses)
    settings            ``ApiSettings`` and API-key loading
    sglang_probes       SGLang's metadata probes, so that sgl-router can put Penelope
                        workers behind it
    standalone          the app and one engine in one process, no Ray (``penelope serve``)
    textstream          token ids -> text deltas, stop strings
"""
