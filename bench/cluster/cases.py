"""Cases a-c: sessions that lose their replica, and what their next turn finds.

Each case starts its own sessions on the fleet of two (one replica per node),
runs `turns_before` turns, waits until their KV is in the store (no replica has
store writes queued, within `WRITES_BOUND_S`: what a replica that dies may lose
is the turns whose writes were still queued), makes the fault, then runs one
more turn:

    replica_kill   a streamed turn of a session is cut: its replica's actor is
                   `ray.kill`ed once tokens flow; Serve starts a new replica
    node_loss      the same with the worker node's raylet SIGKILLed (its replica
                   dies with it); after the next turn the worker joins again
    downscale      the fleet is redeployed with `num_replicas: 1`; Serve stops the
                   worker's replica (never the head's), which drains to the store

Affected sessions are those whose last turn was answered by the lost replica.
Node loss and downscale need a session on the worker's replica before the
fault. Placement is the router's, and the case places its sessions once:
first it waits until the ingress's router knows every live replica (Serve
reports a replica running seconds before a router in another process learns
of it) and until earlier cases' sessions are idle past the router's active
window (`config.ROUTER_ACTIVE_WINDOW_S`: the fleet has no active load then),
and it starts the sessions one at a time, so the second goes to the replica
the first left lighter. A case that still finds no session on the worker's
replica fails, with `placement` saying so. The entry of a case:

    moved_sessions  affected sessions whose next turn another replica answered
    store_tokens    usage.penelope.store_tokens summed over those next turns
    identical       every turn of the case's sessions equals (text, completion
                    tokens, finish reason) the same turn of the reference run
    server_errors   5xx, error events and unfinished streams, the cut turn aside
    cut             how the cut turn ended (an error event, then [DONE])
    ok              all affected sessions moved, each loaded history from the
                    store, identical, no server error, the cut turn ended cleanly
    writes_settled_s  seconds from the last turn before the fault until no replica
                    had store writes queued
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from bench.cluster import app
from bench.cluster.client import Turn, cut_turn, turn_all
from bench.cluster.config import AGENT_KEY, ROUTER_ACTIVE_WINDOW_S, STATS_PERIOD_S
from bench.cluster.nodes import WORKER, Cluster, kill_node
from bench.plan import SessionPlan

Answers = dict[tuple[str, int], tuple[str, int | None, str | None]]
# A finished turn's KV reaches the store within this, on the bench's local S3 server
# sharing 2 cores with the cluster (seconds per write when loaded); past it the case fails.
WRITES_BOUND_S = 20.0


@dataclass(frozen=True)
class Run:
    """What every case needs: where to send, the reference answers, how to redeploy."""

    cluster: Cluster
    url: str
    reference: Answers  # (agent session id, turn) -> the reference run's answer
    redeploy: Callable[[int], None]  # deploy the fleet with this many engine replicas
    settle_timeout_s: float
    request_timeout_s: float


def case_sessions(case: str, plans: list[SessionPlan]) -> list[tuple[str, SessionPlan]]:
    """Session ids and plans of a case."""
    return [(f"{case}-{i}", p) for i, p in enumerate(plans)]


def _worker_tags() -> set[str]:
    roles = app.node_roles()
    return {r.tag for r in app.engine_replicas() if roles.get(r.node_id) == WORKER}


def _by_tag() -> dict[str, app.Replica]:
    return {r.tag: r for r in app.engine_replicas()}


def _homes(turns: list[Turn]) -> dict[str, str]:
    return {t.session: t.replica for t in turns}


def _wait_gone(tags: set[str], timeout_s: float) -> None:
    app.wait_for(f"replicas {sorted(tags)} gone", lambda: not (tags & set(_by_tag())), timeout_s)


def _cut(run: Run, sessions: list[tuple[str, SessionPlan]], homes: dict[str, str],
         on: set[str], k: int, fault: Callable[[str], Any]) -> Turn | None:  # fmt: skip
    """Cut a streamed turn of a session living on one of `on` (None if none lives there)."""
    sid, plan = next(((s, p) for s, p in sessions if homes.get(s) in on), (None, None))
    if sid is None or plan is None:
        return None
    return cut_turn(run.url, sid, plan.turns[k], AGENT_KEY, fault, run.request_timeout_s)


def replica_kill(run: Run, sessions: list[tuple[str, SessionPlan]], homes: dict[str, str],
                 k: int) -> tuple[set[str], Turn | None]:  # fmt: skip
    counts: dict[str, int] = {}
    for tag in homes.values():
        counts[tag] = counts.get(tag, 0) + 1
    victim = max(counts, key=lambda t: counts[t])
    killed: list[str] = []

    def fault(tag: str) -> None:
        app.kill_replica(_by_tag()[tag])
        killed.append(tag)

    cut = _cut(run, sessions, homes, {victim}, k, fault)
    lost = set(killed) or {victim}
    _wait_gone(lost, run.settle_timeout_s)
    return lost, cut


def node_loss(run: Run, sessions: list[tuple[str, SessionPlan]], homes: dict[str, str],
              k: int) -> tuple[set[str], Turn | None]:  # fmt: skip
    lost = _worker_tags()
    cut = _cut(run, sessions, homes, lost, k, lambda _tag: kill_node(run.cluster, WORKER))
    if cut is None:
        kill_node(run.cluster, WORKER)
    app.wait_nodes(1, run.settle_timeout_s)
    _wait_gone(lost, run.settle_timeout_s)
    return lost, cut


def downscale(run: Run, sessions: list[tuple[str, SessionPlan]], homes: dict[str, str],
              k: int) -> tuple[set[str], Turn | None]:  # fmt: skip
    before = set(_by_tag())
    run.redeploy(1)
    app.wait_running(run.settle_timeout_s, replicas=1)
    lost = before - set(_by_tag())
    _wait_gone(lost, run.settle_timeout_s)
    return lost, None


CASES = {"replica_kill": replica_kill, "node_loss": node_loss, "downscale": downscale}


def run_case(run: Run, case: str, plans: list[SessionPlan]) -> dict[str, Any]:
    """One case (see the module docstring); its entry of the result."""
    t0 = time.monotonic()
    last = len(plans[0].turns) - 1
    app.wait_routed(run.url, AGENT_KEY, run.settle_timeout_s)
    time.sleep(ROUTER_ACTIVE_WINDOW_S + 2 * STATS_PERIOD_S)  # earlier sessions go idle
    sessions = case_sessions(case, plans)
    turns = _before_fault(run, sessions, last, AGENT_KEY)
    homes = _homes([t for t in turns if t.turn == last - 1])
    # an agent's next turn comes after a tool call: by then its last turn is in the store
    settled_s = app.wait_writes_settled(run.url, AGENT_KEY, WRITES_BOUND_S, STATS_PERIOD_S)
    # a replica kill takes the busiest replica; the others lose the worker's
    if case != "replica_kill" and not _worker_tags() & set(homes.values()):
        return {"ok": False, "placement": f"no session on the worker's replica: {homes}"}
    lost, cut = CASES[case](run, sessions, homes, last)
    after = turn_all(run.url, sessions, last, AGENT_KEY, run.request_timeout_s)
    # a trace session may rewrite its context between turns: its next prompt then shares
    # only a prefix with the history the fleet held, and may have none to load
    rewrites = {
        s for s, p in sessions if not p.turns[last].prompt.startswith(p.turns[last - 1].prompt)
    }
    entry = summarize(
        case, turns + after, homes, lost, cut, run.reference, time.monotonic() - t0, rewrites
    )
    faults = app.by_replica(run.url, AGENT_KEY, app.STORE_FAULTS)
    return {**entry, "writes_settled_s": round(settled_s, 2), "store_by_replica": faults}


def _before_fault(
    run: Run, sessions: list[tuple[str, SessionPlan]], last: int, key: str
) -> list[Turn]:
    """Turns ``0 .. last-1`` of every session. First turns go one session at a time: the
    router sees each new session's load before it places the next."""
    timeout = run.request_timeout_s
    turns = [t for one in sessions for t in turn_all(run.url, [one], 0, key, timeout)]
    for k in range(1, last):
        turns += turn_all(run.url, sessions, k, key, timeout)
    return turns


def summarize(case: str, turns: list[Turn], homes: dict[str, str], lost: set[str],
              cut: Turn | None, reference: Answers, elapsed_s: float,
              rewrites: set[str] = frozenset(),  # type: ignore[assignment]
              ) -> dict[str, Any]:  # fmt: skip
    last = max(t.turn for t in turns)
    affected = sorted(s for s, tag in homes.items() if tag in lost)
    nexts = {t.session: t for t in turns if t.turn == last and t.session in affected}
    moved = [s for s in affected if nexts[s].status == 200 and nexts[s].replica not in lost]
    mismatched = [
        (t.session, t.turn) for t in turns if reference.get((t.session, t.turn)) != t.answer
    ]
    errors = sum(1 for t in turns if t.server_error)
    cut_entry = None if cut is None else {
        "status": cut.status, "error": cut.error, "done": cut.done, "replica": cut.replica
    }  # fmt: skip
    cut_ok = case == "downscale" or (cut is not None and cut.error is not None and cut.done)
    entry = {
        "moved_sessions": len(moved),
        "affected_sessions": len(affected),
        "store_tokens": sum(nexts[s].store_tokens for s in moved),
        "usage_by_session": {s: nexts[s].usage.get("penelope") for s in moved},
        "identical": not mismatched and bool(turns),
        "mismatched_turns": mismatched,
        "server_errors": errors,
        "cut": cut_entry,
        "lost_replicas": sorted(lost),
        "rewritten_sessions": sorted(rewrites & set(moved)),
        "elapsed_s": round(elapsed_s, 1),
    }
    entry["ok"] = bool(
        affected
        and len(moved) == len(affected)
        and all(nexts[s].store_tokens > 0 for s in moved if s not in rewrites)
        and all(_recomputed(nexts[s]) == 0 for s in moved)
        and entry["identical"]
        and errors == 0
        and cut_ok
    )
    return entry


def _recomputed(t: Turn) -> int:
    return int((t.usage.get("penelope") or {}).get("recomputed_tokens", 0))
