"""The Ray Serve application: its config, builder, deployments and `make run`'s launcher.

Every module here may import Ray; nothing outside this room and `router.ray_router` does.

Modules:
    builder             pure builder: ``ServeConfig`` -> Ray Serve ``Application``
    calls               the failures of a handle call, and a cancel that never raises
    engine_replica      engine deployment: generate, record_routing_stats,
                        record_autoscaling_stats
    ingress             ingress deployment and ``RayBackend`` (handle + cache-affinity
                        router)
    launch              `make run`: serve a config on a local Ray of its own, or fail within
                        seconds saying why
    replica_logs        our packages' log lines through Ray Serve's handlers, in every replica
    replica_stats       which engine replicas are up, and their latest `EngineStats`, as the
                        ingress knows them
    serve_config        the Ray application's config (YAML ``args`` -> frozen dataclasses)
"""
