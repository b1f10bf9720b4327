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
        cap = None
        if self.cap:
            source = CAP_SOURCES.get(self.cap_source or "")
            cap = f"the {self.cap:,}-token cap" + (f" ({source})" if source else "")
        if self.stop_reason:
            rest = f"; without one, the response reached {cap}" if cap else ""
            return "truncated = the engine stopped the response for length (its recorded stop reason)" + rest
        if cap:
            return f"truncated = the response reached {cap}"
        return (
            "truncation unknown: the trace records no stop reason and no cap (upload with max_response_len to count it)"
        )

    def as_dict(self) -> dict:
        return {
            "basis": self.basis,
            "stop_reason": self.stop_reason,
            "cap": self.cap,
            "cap_source": self.cap_source,
            "definition": self.definition(),
        }

    @classmethod
    def from_dict(cls, d: dict | None, cap: int | None = None) -> Truncation:
        d = d or {}
        found = d.get("cap", cap)
        return cls(bool(d.get("stop_reason")), found, d.get("cap_source") if found is not None else None)


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
