"""Serving: the OpenAI-compatible API, standalone mode and the Ray Serve application.

Package map (one job per module):

- ``api``            FastAPI app factory; takes its backend as a factory
- ``schemas``        pydantic request bodies (HTTP edge only)
- ``prepare``        body -> engine request: tokens, sampling, session, tenant, limits
- ``completions``    run a request: admission (429), JSON or SSE, disconnect/timeout -> abort
- ``deadline``       per-request deadlines (``api.request_timeout_s``, 504)
- ``textstream``     token ids -> text deltas, stop strings
- ``responses``      OpenAI response bodies, usage with Penelope's breakdown, SSE framing
- ``errors``         OpenAI error shape and status codes
- ``auth``           bearer keys (constant-time) -> tenant
- ``middleware``     body-size limit (413), request counting
- ``metrics``        Prometheus: engine stats per replica, TTFT/ITL histograms
- ``settings``       ``ApiSettings`` and API-key loading
- ``backend``        what the app talks to; ``LocalBackend`` (one in-process engine,
                     replaced when its step loop dies)
- ``standalone``     ``penelope serve``: uvicorn, one process, no Ray
- ``serve_config``   the Ray application's config (YAML ``args`` -> frozen dataclasses)
- ``engine_replica`` engine deployment: generate, record_routing_stats, record_autoscaling_stats
- ``ingress``        ingress deployment and ``RayBackend`` (handle + cache-affinity router)
- ``autoscaling``    KV pressure signals; ``autoscaling_policy`` the Ray policy class
- ``builder``        pure builder: ``ServeConfig`` -> Ray Serve ``Application``

Modules that import Ray (``engine_replica``, ``ingress``, ``builder``) are not
imported here, so standalone mode never loads Ray.
"""
