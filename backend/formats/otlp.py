"""OTLP/JSON trace exports -> per-lane, per-step operation and state times
(``rank_timings``).

Accepted: the OpenTelemetry protocol's JSON encoding of ``ExportTraceServiceRequest``,
``{"resourceSpans": [{"resource": {"attributes": [...]}, "scopeSpans": [{"spans":
[{"name", "startTimeUnixNano", "endTimeUnixNano", "attributes": [{"key", "value":
{"stringValue" | "intValue" | "doubleValue" | "boolValue": ...}}]}]}]}]}``, either one
request per line (what the OpenTelemetry Collector's file exporter writes; streamed)
or one document (read whole, at most `MAX_DOCUMENT_BYTES`). Times are nanoseconds
since the epoch, as strings or numbers.

verl's RL-Insight reports three kinds of span: ``trace_state`` (an interval during which
a worker is in an RL state such as rollout / update_actor, the state in the span's
``state`` attribute or its name), ``trace_op`` (a measured operation) and
``trace_span`` (a completed span with explicit times). All three become durations:

- lane: the span's ``rank`` (or ``global_rank``, ``worker_rank``) attribute, else the
  ordinal in the upload of its resource's worker identity (``service.instance.id``, else
  ``host.name`` + ``process.pid``, else ``service.name``);
- step: the span's ``step`` (or ``global_step``, ``training_step``) attribute; spans
  without one are not counted (a note says how many);
- phase: ``state:<state>`` for a state span (one with a ``state`` attribute, or whose
  ``rl_insight.type`` / ``type`` attribute is ``state``), else the span name; its first
  40 characters;
- seconds: the summed durations of that phase in that step on that lane.

So the imbalance and stage views read OTLP exports like any per-rank timing; the
absolute interval times are not kept (no timeline table holds them).
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import numpy as np
import orjson

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import INT32_MAX, iter_json_chunks
from backend.formats.spec import FormatSpec

PHASE_MAX = 40
MAX_DOCUMENT_BYTES = 256 << 20
_RANK_KEYS = ("rank", "global_rank", "worker_rank")
_STEP_KEYS = ("step", "global_step", "training_step")


def _value(v):
    if type(v) is not dict:
        return None
    for key in ("stringValue", "intValue", "doubleValue", "boolValue"):
        if key in v:
            x = v[key]
            if key == "intValue" and type(x) is str:
                try:
                    return int(x)
                except ValueError:
                    return None
            return x
    return None


def _attributes(items) -> dict:
    if type(items) is not list:
        return {}
    return {a["key"]: _value(a.get("value")) for a in items if type(a) is dict and "key" in a}


def _int_attr(attrs: dict, keys: tuple[str, ...]) -> int | None:
    for key in keys:
        v = attrs.get(key)
        if type(v) is float and v.is_integer():
            v = int(v)
        if type(v) is str and v.isdigit():
            v = int(v)
        if type(v) is int and 0 <= v <= INT32_MAX:
            return v
    return None


def _nanos(span: dict, key: str, name: str, line: int, where: str) -> int:
    v = span.get(key)
    if type(v) is str and v.isdigit():
        return int(v)
    if type(v) is int and v >= 0:
        return v
    if v is None:
        raise InputError(name, "missing required field", line, f"{where}.{key}")
    raise InputError(name, f"expected nanoseconds since the epoch, got {v!r:.40}", line, f"{where}.{key}")


class _Folder:
    def __init__(self, name: str, lanes: dict):
        self.name = name
        self.lanes = lanes
        self.totals: dict[tuple[int, int, str], float] = {}
        self.unstepped = 0
        self.spans = 0

    def request(self, req, line: int) -> None:
        name = self.name
        if type(req) is not dict or "resourceSpans" not in req:
            raise InputError(name, "expected an OTLP trace request object", line, "resourceSpans")
        for r, rs in enumerate(req["resourceSpans"] or []):
            if type(rs) is not dict:
                raise InputError(name, "expected an object", line, f"resourceSpans[{r}]")
            res = _attributes((rs.get("resource") or {}).get("attributes"))
            who = res.get("service.instance.id") or (
                f"{res.get('host.name')}:{res.get('process.pid')}" if "process.pid" in res else res.get("service.name")
            )
            lane = self.lanes.setdefault(str(who), len(self.lanes))
            for s_i, ss in enumerate(rs.get("scopeSpans") or rs.get("instrumentationLibrarySpans") or []):
                spans = ss.get("spans") if type(ss) is dict else None
                for k, span in enumerate(spans or []):
                    where = f"resourceSpans[{r}].scopeSpans[{s_i}].spans[{k}]"
                    if type(span) is not dict:
                        raise InputError(name, "expected a span object", line, where)
                    start = _nanos(span, "startTimeUnixNano", name, line, where)
                    end = _nanos(span, "endTimeUnixNano", name, line, where)
                    if end < start:
                        raise InputError(name, "the span ends before it starts", line, f"{where}.endTimeUnixNano")
                    self.spans += 1
                    attrs = _attributes(span.get("attributes"))
                    step = _int_attr(attrs, _STEP_KEYS)
                    if step is None:
                        self.unstepped += 1
                        continue
                    rank = _int_attr(attrs, _RANK_KEYS)
                    rank = lane if rank is None else rank
                    kind = attrs.get("rl_insight.type", attrs.get("type"))
                    if "state" in attrs or kind == "state":
                        phase = f"state:{attrs.get('state') or span.get('name', '')}"
                    else:
                        phase = str(span.get("name", ""))
                    key = (step, rank, phase[:PHASE_MAX])
                    self.totals[key] = self.totals.get(key, 0.0) + (end - start) / 1e9


def _head(source: Source) -> bytes:
    with source.open() as stream:
        return stream.read(1 << 16)


def read_otlp(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """OTLP/JSON trace export -> one ``rank_timings`` batch (per step, lane and phase)."""
    name = source.name
    folder = _Folder(name, result.state.setdefault("otlp_lanes", {}))
    head = _head(source).lstrip(b"\xef\xbb\xbf \t\r\n")
    first_line = head.split(b"\n", 1)[0].strip()
    one_per_line = first_line.startswith(b"{") and first_line.endswith(b"}")
    if one_per_line:
        for chunk in iter_json_chunks(source):
            for i, req in enumerate(chunk.rows):
                folder.request(req, chunk.line(i))
    else:
        with source.open() as stream:
            data = stream.read(MAX_DOCUMENT_BYTES + 1)
        if len(data) > MAX_DOCUMENT_BYTES:
            raise InputError(name, "a single OTLP JSON document over 256 MiB: export one request per line instead")
        try:
            doc = orjson.loads(data)
        except orjson.JSONDecodeError as exc:
            raise InputError(name, f"invalid JSON: {exc}") from None
        folder.request(doc, 1)
    if folder.unstepped:
        result.skipped.append(f"{name}: {folder.unstepped} of {folder.spans} spans have no step attribute, not counted")
    if not folder.totals:
        return
    keys = sorted(folder.totals)
    yield TableBatch(
        "rank_timings",
        {
            "step": np.fromiter((k[0] for k in keys), np.int32, len(keys)),
            "rank": np.fromiter((k[1] for k in keys), np.int32, len(keys)),
            "phase": [k[2] for k in keys],
            "seconds": np.fromiter((folder.totals[k] for k in keys), np.float64, len(keys)),
        },
    )


_OTLP_HEAD = re.compile(rb'^\s*(?:\xef\xbb\xbf)?\s*\{\s*"resourceSpans"\s*:')

FORMAT_SPECS = (
    FormatSpec(
        "otlp-json",
        read_otlp,
        "a JSON object whose first key is ``resourceSpans``",
        head=lambda head, name: bool(_OTLP_HEAD.match(head)),
        order=50,
    ),
)
