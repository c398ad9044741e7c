"""`penelope bench cluster`: the Ray Serve app on a real two-node Ray cluster on this machine.

Modules:
    app        the bench as a Ray driver: deploy the config, the app's state, replicas by
               node
    autoscale  the load ramp (bench.load's client) and the replica count over time
    bench      the run from start to end: cluster, deploy, reference run, cases, ramp
    calibrate  the ramp's session slots, from a measured service time and the trace's schedule
    cases      replica_kill, node_loss, downscale: sessions moved, store tokens, identical
    cli        the command: options, the JSON, the table
    client     greedy streamed turns whose answers are compared; a turn cut by a fault
    config     `ClusterConfig`, and the `serve deploy` config derived from serve_config.yaml
    loopback   the `ray` CLI and driver with every address kept on 127.0.0.1
    nodes      the nodes (`ray start --head`, `ray start --address`), engine slots as
               custom resources, token auth in the cluster's own dir; teardown by pid
    s3         A local S3-compatible server (moto's server mode) for the cluster bench and
               the tests
"""
