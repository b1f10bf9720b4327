"""The model a trace was trained with, when its name or metadata says so: what the
advisor's form and the CLI propose instead of the default preset.

`propose_model(name, metadata)` reads the trace name and the metadata values whose key
mentions a model (``model``, ``model_name``, ``actor_rollout_ref.model.path``, ...) for a
size (``32b``, ``1.5B``; ``16k`` is a length, not a size) and a family (``qwen3``,
``qwen2.5`` / ``qwen2_5``, ``llama``, ``deepcoder``, ``vl``), and returns the preset of
`MODEL_PRESETS` they name -- the family's, or the only preset of that size -- with the
words it matched, or None when nothing names a preset. `model_proposal` says it the way
the advisor's form and CLI show it ("proposed from the trace name").
"""

from __future__ import annotations

import re

from core.simulator.config import MODEL_PRESETS

_SIZE = re.compile(r"(?<![0-9.])(\d+(?:\.\d+)?)\s*b(?![a-z0-9])")
_FAMILIES = (  # (token pattern in the text, the family as the preset names spell it)
    (re.compile(r"qwen\s*3"), "qwen3"),
    (re.compile(r"qwen\s*2[._]?5"), "qwen2.5"),
    (re.compile(r"llama"), "llama"),
    (re.compile(r"deepcoder"), "deepcoder"),
)
_VISION = re.compile(r"(?<![a-z])vl(?![a-z])")


def _texts(name: str | None, metadata: dict | None, key: str = "") -> list[str]:
    out = [name] if name else []
    for k, v in (metadata or {}).items():
        path = f"{key}.{k}" if key else str(k)
        if isinstance(v, dict):
            out += _texts(None, v, path)
        elif isinstance(v, str) and "model" in path.lower():
            out.append(v)
    return out


def _size(preset: str) -> str:
    m = re.search(r"(\d+(?:\.\d+)?)B$", preset)
    return m.group(1) if m else ""


def propose_model(name: str | None, metadata: dict | None = None) -> tuple[str, str] | None:
    """(preset name, the text that named it) or None; metadata first, then the name."""
    for text in reversed(_texts(name, metadata)):
        low = text.lower().replace("-", "_")
        for m in _SIZE.finditer(low):
            size = m.group(1)
            found = _preset_of(low, size)
            if found:
                return found, text
    return None


def _preset_of(low: str, size: str) -> str | None:
    sized = [p for p in MODEL_PRESETS if _size(p) == size]
    family = next((f for pattern, f in _FAMILIES if pattern.search(low)), None)
    vision = bool(_VISION.search(low))
    if family is not None:
        sized = [p for p in sized if p.lower().startswith(family)]
    sized = [p for p in sized if ("-vl-" in p.lower()) == vision] or sized
    if len(sized) == 1:
        return sized[0]
    qwen = [p for p in sized if p.lower().startswith("qwen2.5")]  # the common family when none is named
    return qwen[0] if family is None and len(qwen) == 1 else None


def model_proposal(name: str | None, metadata: dict | None = None) -> dict | None:
    """{"model", "source" ("name" or "metadata"), "text", "note"} of `propose_model`, or None."""
    found = propose_model(name, metadata)
    if found is None:
        return None
    preset, text = found
    source = "name" if text == name else "metadata"
    return {"model": preset, "source": source, "text": text, "note": f"proposed from the trace {source} ({text!r})"}
