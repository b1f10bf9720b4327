"""What "truncated" means: one definition for every figure, filter, table and card.

A sample is truncated when the engine stopped its response for length, where the trace
records the engine's stop reason (e.g. PolyTrace multi-turn ``finish_reason ==
"length"``, or a native ``truncated`` column); a sample without a recorded stop reason
is truncated when its response reached the cap, the trace's max response length.

The cap comes, first found, from the upload (``max_response_len`` given), from the
trace's files (a format that records it), or from the data: the longest response, when
at least `INFER_MIN_HITS` samples reach it exactly (sampling stops there; a single
longest sample proves nothing). Ingestion writes the definition into the stored
per-sample ``truncated`` column once, so summaries, the samples filter, analyses and
pages all count the same samples.

A second figure says how many responses sit at the length cap, whatever their stop
reason: where stop reasons are recorded few samples may be "truncated" (stopped for
length) while many more end exactly at the cap (a multi-turn budget, a tool-call limit
that ends the trajectory there). `at_cap_definition` names it: the share of samples
whose response reached the cap, the cap being the truncation's own, else (stop reasons
recorded, no cap given or recorded) the one the data shows (the longest response,
reached exactly by several samples). Summaries carry it per step as ``at_cap_rate``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

INFER_MIN_HITS = 2
CAP_SOURCES = {
    "given": "given at upload",
    "recorded": "recorded in the trace's files",
    "inferred": "inferred: the longest response, reached exactly by several samples",
}


@dataclass(frozen=True)
class Truncation:
    """A trace's truncation: whether it records stop reasons, and its cap."""

    stop_reason: bool = False
    cap: int | None = None
    cap_source: str | None = None
    # the cap the data shows where stop reasons are recorded (not used for `truncated`)
    shown_cap: int | None = None

    @property
    def length_cap(self) -> int | None:
        """The cap "at the length cap" counts against (None: unknown)."""
        return self.cap or self.shown_cap

    @property
    def length_cap_source(self) -> str | None:
        return self.cap_source if self.cap else ("inferred" if self.shown_cap else None)

    @property
    def known(self) -> bool:
        return self.stop_reason or self.cap is not None

    @property
    def basis(self) -> str | None:
        """ "stop_reason" (recorded per sample), "cap", or None (unknown)."""
        if self.stop_reason:
            return "stop_reason"
        return "cap" if self.cap is not None else None

    def definition(self) -> str:
        """The sentence pages print beside every truncation figure."""
        cap = _cap_words(self.cap, self.cap_source) if self.cap else None
        if self.stop_reason:
            rest = f"; without one, the response reached {cap}" if cap else ""
            return "truncated = the engine stopped the response for length (its recorded stop reason)" + rest
        if cap:
            return f"truncated = the response reached {cap}"
        return (
            "truncation unknown: the trace records no stop reason and no cap (upload with max_response_len to count it)"
        )

    def at_cap_definition(self) -> str:
        """The sentence pages print beside every "at the length cap" figure."""
        cap = self.length_cap
        if not cap:
            return "at the length cap: unknown (no cap given, recorded in the files or shown by the data)"
        why = "" if self.stop_reason else " (the same samples as truncated: no stop reasons are recorded)"
        reached = _cap_words(cap, self.length_cap_source)
        return f"at the length cap = the response reached {reached}, whatever its stop reason{why}"

    def as_dict(self) -> dict:
        return {
            "basis": self.basis,
            "stop_reason": self.stop_reason,
            "cap": self.cap,
            "cap_source": self.cap_source,
            "definition": self.definition(),
            "length_cap": self.length_cap,
            "length_cap_source": self.length_cap_source,
            "at_cap_definition": self.at_cap_definition(),
        }

    @classmethod
    def from_dict(cls, d: dict | None, cap: int | None = None) -> Truncation:
        d = d or {}
        found = d.get("cap", cap)
        return cls(
            bool(d.get("stop_reason")), found, d.get("cap_source") if found is not None else None, d.get("shown_cap")
        )


def _cap_words(cap: int, source: str | None) -> str:
    said = CAP_SOURCES.get(source or "")
    return f"the {cap:,}-token cap" + (f" ({said})" if said else "")


def choose_cap(given: int | None, recorded: int | None, inferred: int | None) -> tuple[int | None, str | None]:
    """The cap and where it came from, first found of given, recorded, inferred."""
    for value, source in ((given, "given"), (recorded, "recorded"), (inferred, "inferred")):
        if value:
            return int(value), source
    return None, None


def truncated_rows(response_len: np.ndarray, flag: np.ndarray | None, cap: int | None) -> np.ndarray | None:
    """Per sample, the definition: the stored flag when there is one (ingestion has
    already applied the cap to samples without a stop reason), else response >= cap;
    None when neither is known."""
    if flag is not None:
        return np.asarray(flag, dtype=bool)
    if cap:
        return np.asarray(response_len) >= cap
    return None


def at_cap_rows(response_len: np.ndarray, length_cap: int | None) -> np.ndarray | None:
    """Per sample, whether its response reached the length cap (None: no cap known)."""
    return np.asarray(response_len) >= length_cap if length_cap else None
