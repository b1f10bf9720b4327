"""The repetition flag of a response: does it end in a loop?

Definition (characters, so it needs no tokenizer and reads the same for every run):
trailing whitespace removed, a response of at least `WINDOW` (1,000) characters is
*repeating* with period p when its last `WINDOW` characters are periodic with period
p <= `MAX_PERIOD` (333): every character equals the one p places before it, so the same
p characters were written at least three times in a row to finish the response. The flag
stores the smallest such p (0: not repeating). A model that loops ("I think the answer
is 5. I think the answer is 5. …") or fails to stop (a run of one character) is
flagged; text that restates a sentence once is not.

Speed: a candidate period must repeat the window's last `PROBE` characters, so the
candidates are found with `str.rfind` (C) and only those are compared whole: a few
microseconds per response instead of a comparison per possible period.
"""

from __future__ import annotations

WINDOW = 1000
MAX_PERIOD = WINDOW // 3
PROBE = 8


def repeat_period(text: str, window: int = WINDOW, max_period: int = MAX_PERIOD) -> int:
    """The smallest period p <= max_period of the last `window` characters, else 0."""
    text = text.rstrip()
    if len(text) < window:
        return 0
    w = text[-window:]
    probe = w[-PROBE:]
    end = window - 1  # rfind looks for the probe ending before the last character
    while True:
        at = w.rfind(probe, 0, end)
        if at < 0:
            return 0
        p = window - PROBE - at
        if p > max_period:
            return 0
        if w[p:] == w[:-p]:
            return p
        end = at + PROBE - 1
