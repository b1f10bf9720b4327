"""A sample's text at rest: zstd-compressed, one frame per text (a sample page or a
search reads one sample without its neighbours). Level 1: model output shrinks about
2-4x (level 3 gains ~1% more on it). A chunk of texts is compressed in one call
(`pack_many`): per-call overhead dominates on texts of a few KB, so one call per text
runs at half the speed."""

from __future__ import annotations

import threading

import zstandard

LEVEL = 1
_local = threading.local()  # zstd contexts are not thread-safe; one per thread


def _contexts() -> tuple[zstandard.ZstdCompressor, zstandard.ZstdDecompressor]:
    if not hasattr(_local, "pair"):
        _local.pair = (zstandard.ZstdCompressor(level=LEVEL), zstandard.ZstdDecompressor())
    return _local.pair


def pack_many(texts: list[str]) -> list[bytes]:
    """Each text as one zstd frame, compressed in one call into the library."""
    raw: list[bytes | bytearray | memoryview] = [t.encode("utf-8", "surrogatepass") for t in texts]
    if not raw:
        return []
    try:
        frames = _contexts()[0].multi_compress_to_buffer(raw, threads=0)
    except (AttributeError, NotImplementedError, ValueError):  # no batch call; or only empty texts
        return [_contexts()[0].compress(b) for b in raw]
    return [frames[i].tobytes() for i in range(len(frames))]


def unpack(blob: bytes) -> str:
    return _contexts()[1].decompress(bytes(blob)).decode("utf-8", "surrogatepass")
