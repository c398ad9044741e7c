"""`ray` as this bench runs it: every address stays on 127.0.0.1.

    python -m bench.cluster.loopback start --head ...   (the `ray` CLI, loopback only)

Ray turns `127.0.0.1` into the machine's outward address
(`ray._private.services.resolve_ip_for_localhost`, also for an explicit
`--node-ip-address 127.0.0.1`), so nodes on one machine would talk over its
network interface. The bench keeps all of its traffic on loopback: its `ray`
commands and its driver use `keep_loopback()` first, which makes that function
return the host it is given. A real cluster of several machines needs none of
this (the guide in deployments/README.md).
"""

from __future__ import annotations


def keep_loopback() -> None:
    import ray._private.services as services

    services.resolve_ip_for_localhost = lambda host: host


def main() -> None:
    keep_loopback()
    from ray.scripts.scripts import main as ray_main

    ray_main()


if __name__ == "__main__":
    main()
