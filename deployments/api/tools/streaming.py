"""Incremental reply parsing: text deltas in, OpenAI-style stream events out.

    feed('Let me check. <tool_call>\\n{"name": "get_w')  -> [TextDelta("Let me check. ")]
    feed('eather", "arguments": {"city": "Pa')          -> [CallStart(0, id, "get_weather"),
                                                          ArgsDelta(0, '{"city": "Pa')]
    feed('ris"}}\\n</tool_call>')                         -> [ArgsDelta(0, 'ris"}')]

Text that may begin a call's opening tag is held back until it is told apart.
Inside a call, the id and name go out as soon as the body's `"name": "..."` is
whole and its arguments open an object (the name first, as the formats write
it); then the arguments go out as
the model writes them, holding back only a tail that may be the body's closing
brace. A body whose name does not come first is sent whole once it closes.

At the end of a call a text that is no valid call (bad JSON) goes out as text
when nothing of it was sent; once its name is out it can only be completed,
never taken back (as with any OpenAI-compatible stream). The argument pieces
of a valid call join to JSON text that decodes to the arguments that
`ReplyParser.parse` gives for the same reply.
"""

from __future__ import annotations

import json
import re
from typing import Any

from deployments.api.tools.parsers import ReplyParser, _call_of, _loads
from deployments.api.tools.types import ArgsDelta, CallStart, StreamEvent, TextDelta, ToolCall

_NAME_FIRST = re.compile(
    r'\s*\{\s*"name"\s*:\s*"((?:[^"\\]|\\.)+)"\s*,\s*"(?:arguments|parameters)"\s*:\s*(?=\{)'
)
_HELD_TAIL = " \t\r\n}"
_NEVER = "\0"  # an opening tag no text contains: tagless replies that are plain text


class StreamParser:
    """One reply's incremental parser (make one per response)."""

    def __init__(self, parser: ReplyParser) -> None:
        self._open = parser.open_tag
        self._close = parser.close_tag
        self._python_tag: str = getattr(parser, "python_tag", "")
        self._pending = ""  # text received, not yet sent nor taken into a body
        self._in_call = False
        self._decided = bool(self._open)  # tagless: is the reply a call? known at its first char
        self._body = ""  # the current call's body so far
        self._args_sent = 0  # chars of the current call's arguments already sent
        self._started = False  # the current call's CallStart went out
        self._index = 0  # the current call's number
        self.made_call = False  # a CallStart went out: the reply ends with "tool_calls"

    def feed(self, delta: str) -> list[StreamEvent]:
        self._pending += delta
        events: list[StreamEvent] = []
        while True:
            state = (self._pending, self._in_call, self._decided)
            events += self._step()
            if (self._pending, self._in_call, self._decided) == state:
                self.made_call = self.made_call or any(isinstance(e, CallStart) for e in events)
                return events

    def finish(self) -> list[StreamEvent]:
        """The end of the reply: what was held back, and a call left open."""
        events = self.feed("")
        if self._in_call:
            self._body += self._pending
            self._pending = ""
            events += self._end_call(closed=False)
        elif self._pending:
            events.append(TextDelta(self._pending))
            self._pending = ""
        self.made_call = self.made_call or any(isinstance(e, CallStart) for e in events)
        return events

    def _step(self) -> list[StreamEvent]:
        if not self._decided:
            return self._decide()
        return self._inside() if self._in_call else self._outside()

    def _decide(self) -> list[StreamEvent]:
        """Tagless formats: a reply starting with `{` (or the python tag) is a call."""
        text = self._pending.lstrip()
        tag = self._python_tag
        if tag and tag.startswith(text[: len(tag)]):
            if len(text) < len(tag):
                return []
            text = text[len(tag) :].lstrip()
        if not text:
            return []
        self._decided = True
        if text.startswith("{"):
            self._pending, self._in_call = text, True
            return []
        self._open = _NEVER
        return []

    def _outside(self) -> list[StreamEvent]:
        at = self._pending.find(self._open)
        if at >= 0:
            text, self._pending = self._pending[:at], self._pending[at + len(self._open) :]
            self._in_call = True
            return [TextDelta(text)] if text else []
        keep = _partial_suffix(self._pending, self._open)
        text = self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(text) :]
        return [TextDelta(text)] if text else []

    def _inside(self) -> list[StreamEvent]:
        if self._close and self._close in self._pending:
            body, _, self._pending = self._pending.partition(self._close)
            self._body += body
            return self._end_call(closed=True)
        keep = _partial_suffix(self._pending, self._close) if self._close else 0
        self._body += self._pending[: len(self._pending) - keep]
        self._pending = self._pending[len(self._pending) - keep :]
        return self._stream_args()

    def _stream_args(self) -> list[StreamEvent]:
        body = self._body.lstrip()
        m = _NAME_FIRST.match(body)
        if m is None:
            return []
        events: list[StreamEvent] = []
        if not self._started:
            name = _loads(f'"{m.group(1)}"')
            if not isinstance(name, str):
                return []
            events.append(CallStart(self._index, ToolCall(name, "").id, name))
            self._started = True
        if not self._close and _first_object_end(body) is not None:
            return events  # tagless: the first call is whole; the rest waits for the end
        args = body[m.end() :]
        end = len(args)
        while end > self._args_sent and args[end - 1] in _HELD_TAIL:
            end -= 1
        if end > self._args_sent:
            events.append(ArgsDelta(self._index, args[self._args_sent : end]))
            self._args_sent = end
        return events

    def _end_call(self, closed: bool) -> list[StreamEvent]:
        """The call's body is whole: send what is left of it, or the text if it is no call."""
        events = self._stream_args()
        body = self._body.lstrip()
        calls = _calls_in(body)
        if calls is None and not self._started:
            events.append(TextDelta(self._open + self._body + (self._close if closed else "")))
        elif calls is not None:
            first = 0
            if self._started:  # finish the call whose pieces went out
                end = _first_object_end(body)
                m = _NAME_FIRST.match(body)
                assert end is not None and m is not None
                args = body[m.end() : end].rstrip()[:-1].rstrip()  # less the body's own "}"
                if args[self._args_sent :]:
                    events.append(ArgsDelta(self._index, args[self._args_sent :]))
                first, self._index = 1, self._index + 1
            for call in calls[first:]:
                events += [CallStart(self._index, call.id, call.name)]
                events += [ArgsDelta(self._index, call.arguments)]
                self._index += 1
        elif self._started:
            self._index += 1
        self._in_call, self._body, self._args_sent, self._started = False, "", 0, False
        return events


def _first_object_end(body: str) -> int | None:
    """Where the first JSON value of `body` ends, or None while it is incomplete or bad."""
    try:
        return json.JSONDecoder().raw_decode(body)[1]
    except ValueError:
        return None


def _calls_in(body: str) -> list[ToolCall] | None:
    """The calls of a whole body: JSON objects separated by ";" or spaces; None if bad."""
    decoder, out, at = json.JSONDecoder(), [], 0
    while at < len(body):
        try:
            obj, at = decoder.raw_decode(body, at)
        except ValueError:
            return None
        call = _call_of(obj, ("arguments", "parameters"))
        if call is None:
            return None
        out.append(call)
        while at < len(body) and body[at] in " \t\r\n;":
            at += 1
    return out or None


def _partial_suffix(text: str, tag: str) -> int:
    """Length of the longest tail of `text` that is a proper prefix of `tag`."""
    for k in range(min(len(text), len(tag) - 1), 0, -1):
        if tag.startswith(text[-k:]):
            return k
    return 0


def stream_events(parser: ReplyParser, pieces: list[str]) -> list[StreamEvent]:
    """Every event for a reply that arrives in `pieces` (tests, and whole replies)."""
    sp = StreamParser(parser)
    events = [e for piece in pieces for e in sp.feed(piece)]
    return events + sp.finish()


def joined(events: list[StreamEvent]) -> dict[str, Any]:
    """Events folded back into content and calls (what a client assembles)."""
    content = "".join(e.text for e in events if isinstance(e, TextDelta))
    calls: dict[int, dict[str, str]] = {}
    for e in events:
        if isinstance(e, CallStart):
            calls[e.index] = {"id": e.id, "name": e.name, "arguments": ""}
        elif isinstance(e, ArgsDelta):
            calls[e.index]["arguments"] += e.text
    return {"content": content, "calls": [calls[i] for i in sorted(calls)]}
