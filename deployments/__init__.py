"""Serving: the HTTP API, standalone mode and the Ray Serve application, in rooms by concern.

Dependencies point one way: ``ray`` -> ``api`` and ``metrics``; ``api`` never imports
Ray, so standalone mode never loads it.

Modules:
    api/                the HTTP edge (OpenAI and Anthropic APIs, hints, auth, errors,
                        streaming) and `penelope serve`'s one-process server
    ray/                the Ray Serve application: config, builder, engine and ingress
                        deployments, launcher
    metrics/            Prometheus series and KV-aware autoscaling
"""
