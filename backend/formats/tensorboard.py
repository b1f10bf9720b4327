"""TensorBoard event files (``events.out.tfevents.*``) -> per-step metrics (``steps``).

The file is a sequence of TFRecords (``uint64 length, uint32 masked CRC32C of the
length, data, uint32 masked CRC32C of the data``), each an ``Event`` protocol buffer.
Events are decoded with the Event protocol buffer classes tensorboardX ships
(``tensorboardX.proto``: the same messages as TensorBoard's, without TensorBoard's
server and its dependencies); only the record framing and scalar tensors are read
here, over the upload's stream. The length CRC of the first record is checked (it tells
an event file from other binary files); a corrupt body fails to decode.

Scalars are read in both shapes TensorBoard writes: TF1 / tensorboardX / PyTorch
``simple_value`` and TF2 ``tensor`` summaries holding one number. Each (step, tag)
becomes ``metrics[tag]``; ``timing_s/*`` (verl's tracking logger logs its metrics to
TensorBoard under the same names) also fill the stage timings t_gen ... t_step, as
for verl logs. Histograms, images, text and graph events are skipped.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import numpy as np

from backend.formats.base import InputError, ReadResult, Source, TableBatch
from backend.formats.jsonl import INT32_MAX
from backend.formats.spec import FormatSpec
from backend.formats.step_metrics import StepMetrics

_HEADER = struct.Struct("<QI")
_FOOTER = struct.Struct("<I")
_MAX_RECORD = 1 << 30
# An Event record starts with one of its fields' tags: wall_time (1, double), step (2,
# varint) or file_version / summary ... (3.., length-delimited).
_EVENT_FIRST_TAGS = {0x09, 0x10, 0x1A, 0x22, 0x2A, 0x32, 0x3A, 0x42, 0x4A, 0x52}


def _masked_crc(data: bytes) -> int:
    from tensorboardX.record_writer import masked_crc32c

    return masked_crc32c(data)


# TensorProto dtype enum values (tensorflow/core/framework/types.proto) of scalar
# numbers, with the repeated field that holds them and their numpy type.
_TENSOR_DTYPES = {
    1: ("float_val", np.float32),
    2: ("double_val", np.float64),
    3: ("int_val", np.int32),
    4: ("int_val", np.uint8),
    5: ("int_val", np.int16),
    6: ("int_val", np.int8),
    9: ("int64_val", np.int64),
    10: ("bool_val", np.bool_),
    19: ("half_val", np.float16),
}


def scalar_of_tensor(tensor) -> float | None:
    """The number a 0-d TensorProto holds (in `tensor_content` or its typed field), or
    None for strings and other non-numbers."""
    kind = _TENSOR_DTYPES.get(tensor.dtype)
    if kind is None:
        return None
    field, dtype = kind
    if tensor.tensor_content:
        content: np.ndarray = np.frombuffer(tensor.tensor_content, dtype=dtype)
        return float(content[0]) if content.size == 1 else None
    if field == "half_val":  # stored as the float16's bits
        bits = list(tensor.half_val)
        return float(np.array(bits, dtype=np.uint16).view(np.float16)[0]) if len(bits) == 1 else None
    values = list(getattr(tensor, field))
    return float(values[0]) if len(values) == 1 else None


def iter_records(stream, name: str, block: int = 1 << 20) -> Iterator[tuple[int, bytes]]:
    """(1-based record number, record body) for each TFRecord of `stream`, read in
    blocks (one read per block, not three per record)."""
    number = 0
    buf = b""
    pos = 0
    unpack = _HEADER.unpack_from
    eof = False
    while True:
        if len(buf) - pos < 12 and not eof:
            more = stream.read(block)
            eof = not more
            buf = buf[pos:] + more
            pos = 0
        if pos >= len(buf):
            return
        number += 1
        if len(buf) - pos < 12:
            raise InputError(name, "truncated record header (the file ends mid-record)", number, "record")
        length, length_crc = unpack(buf, pos)
        if number == 1 and _masked_crc(buf[pos : pos + 8]) != length_crc:
            raise InputError(
                name, "record length fails its CRC check: not a TFRecord event file, or corrupt", number, "record"
            )
        if length > _MAX_RECORD:
            raise InputError(name, f"record of {length} bytes is too large", number, "record")
        end = pos + 12 + length + 4
        while len(buf) < end and not eof:
            more = stream.read(max(block, end - len(buf)))
            eof = not more
            buf = buf[pos:] + more
            end -= pos
            pos = 0
        if len(buf) < end:
            raise InputError(name, "truncated record (the file ends mid-record)", number, "record")
        yield number, buf[pos + 12 : end - 4]
        pos = end


def looks_like_tfrecord(head: bytes) -> bool:
    """A first record whose length CRC checks out."""
    if len(head) < 13 or head[12] not in _EVENT_FIRST_TAGS:
        return False  # cheap test first: spares other files TensorBoard's import
    length, length_crc = _HEADER.unpack(head[:12])
    return length < _MAX_RECORD and _masked_crc(head[:8]) == length_crc


def read_tensorboard(source: Source, result: ReadResult) -> Iterator[TableBatch]:
    """TensorBoard scalars -> ``steps`` batches (bounded memory, see StepMetrics)."""
    from google.protobuf.message import DecodeError
    from tensorboardX.proto import event_pb2

    name = source.name
    buffer = StepMetrics()
    parse = event_pb2.Event.FromString
    add = buffer.add
    with source.open() as stream:
        for number, body in iter_records(stream, name):
            try:
                event = parse(body)
            except DecodeError as exc:
                raise InputError(name, f"not a TensorBoard Event record: {exc}", number, "record") from exc
            if not event.HasField("summary"):
                continue
            step = event.step
            if not 0 <= step <= INT32_MAX:
                raise InputError(name, f"step {step} out of range", number, "step")
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    point = value.simple_value
                elif value.HasField("tensor") and not value.tensor.tensor_shape.dim:
                    number_or_none = scalar_of_tensor(value.tensor)
                    if number_or_none is None:
                        continue  # a string tensor (text summary)
                    point = number_or_none
                else:
                    continue
                spilled = add(step, value.tag, point)
                if spilled is not None:
                    yield spilled
    if buffer.points == 0:
        result.skipped.append(f"{name}: no scalar summaries (only histograms, images or graphs)")
        return
    last = buffer.finish()
    if last is not None:
        yield last


FORMAT_SPECS = (
    FormatSpec(
        "tensorboard",
        read_tensorboard,
        "``events.out.tfevents.*``; or a first TFRecord whose length CRC checks",
        names=(r"^events\.out\.tfevents\..+",),
        head=lambda head, name: looks_like_tfrecord(head),
        order=60,
        carries={"steps": "TensorBoard"},
    ),
)
