"""`penelope bench side`: real routers side by side on this machine, through the HTTP API.

Modules:
    cli      the command: options, one run per set-up, the table and the JSON
    client   the spawned client: sessions as streamed `/v1/completions`, one record each
    config   `SideConfig`, the set-ups, and each Ray set-up's Serve configuration
    plan     the seeded agent sessions as text prompts, the same for every set-up
    ray_app  a local Ray, and the application of one set-up on it, torn down after
    sgl      sgl-router in front of two `penelope serve` processes
"""
