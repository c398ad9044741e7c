"""The session endpoint's hints, from the adapter to SGLang's scheduler and back.

The penelope cache (and its session records) lives in SGLang's scheduler
process; the adapter (`engine.SGLangEngine`) lives with the HTTP app. Hints
sent between turns travel on SGLang's own RPC channel, the one
`sglang.Engine.collective_rpc` uses (`Engine.send_to_rpc`, a ZMQ DEALER, to
the scheduler's `recv_from_rpc`):

    adapter --RpcReqInput(method=HINTS_METHOD, rid, parameters)--> scheduler
    scheduler: hooks.handle_rpc_request -> between_turns.apply(cache, ...)
    adapter <--RpcReqOutput(rid, success, message=JSON grants)-- scheduler

`parameters` is flat scalars (session, tenant, retain_s, expected_gap_s,
end_session), as SGLang's `RpcReqInput` types it; the reply's `message` is the
grants as JSON. Replies are matched by `rid`; one left over from a call that
timed out is dropped.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import asdict
from typing import Any

import zmq
from sglang.srt.managers.io_struct import RpcReqInput, RpcReqOutput, sock_recv, sock_send

from penelope_engine.errors import EngineError
from penelope_engine.hints import HintGrant, SessionHints

HINTS_METHOD = "penelope_session_hints"
TIMEOUT_S = 5.0  # how long the adapter waits for the scheduler's reply


def rpc_input(rid: str, session: str, tenant: str, hints: SessionHints) -> RpcReqInput:
    params: dict[str, bool | int | float | str | None] = {
        "session": session,
        "tenant": tenant,
        "retain_s": hints.retain_s,
        "expected_gap_s": hints.expected_gap_s,
        "end_session": hints.end_session,
    }
    return RpcReqInput(rid=rid, method=HINTS_METHOD, parameters=params)


def hints_of(params: dict[str, Any]) -> tuple[str, str, SessionHints]:
    """(session, tenant, hints) of an `rpc_input`'s parameters (validated again)."""

    def seconds(name: str) -> float | None:
        value = params.get(name)
        return None if value is None else float(value)

    hints = SessionHints(
        retain_s=seconds("retain_s"),
        expected_gap_s=seconds("expected_gap_s"),
        end_session=bool(params.get("end_session", False)),
    )
    return str(params["session"]), str(params["tenant"]), hints


def reply(rid: str | None, grants: list[HintGrant]) -> RpcReqOutput:
    return RpcReqOutput(rid=rid, success=True, message=json.dumps([asdict(g) for g in grants]))


def grants_of(out: RpcReqOutput) -> list[HintGrant]:
    if not out.success:
        raise EngineError(f"SGLang's scheduler refused the session hints: {out.message}")
    return [HintGrant(**g) for g in json.loads(out.message)]


class HintChannel:
    """The adapter's end: one call at a time on `Engine.send_to_rpc` (a ZMQ socket is not
    thread-safe). `send` blocks: call it off the event loop."""

    def __init__(self, socket: zmq.Socket, timeout_s: float = TIMEOUT_S) -> None:
        self.socket = socket
        self.timeout_s = timeout_s
        self._lock = threading.Lock()

    def send(self, session: str, tenant: str, hints: SessionHints) -> list[HintGrant]:
        rid = f"penelope-hints-{uuid.uuid4().hex}"
        with self._lock:
            sock_send(self.socket, rpc_input(rid, session, tenant, hints))
            deadline = time.monotonic() + self.timeout_s
            while True:
                left_ms = int((deadline - time.monotonic()) * 1000)
                if left_ms <= 0 or not self.socket.poll(left_ms, zmq.POLLIN):
                    raise EngineError(
                        f"SGLang's scheduler did not answer the session hints in "
                        f"{self.timeout_s:g} s"
                    )
                out = sock_recv(self.socket)
                if isinstance(out, RpcReqOutput) and out.rid == rid:
                    return grants_of(out)
