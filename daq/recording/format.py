"""The `.rigrun` file format: byte layout, encoders and decoders (no I/O).

A run file is a header followed by records, appended and never rewritten, so a file cut at any
byte (power loss, `kill -9`, full disk) still holds every record written before the cut. Every
record carries a CRC32 of its own header, so a reader can trust a record's length before it
reads the body, and a CRC32 of its body, so a damaged body is detected rather than used.
`docs/recording.md` is the full specification; the struct formats below are its source of truth.

    file header   magic(8) version:u16 flags:u16 meta_len:u32 meta_crc:u32 | meta (msgpack)
    CHNK record   b"CHNK" rows:u32 width:u32 first_seq:u64 body_crc:u32 head_crc:u32
                  | rows·width float64, little-endian, row-major
    EVNT record   b"EVNT" length:u32 body_crc:u32 head_crc:u32 | msgpack map
    TRLR record   b"TRLR" length:u32 body_crc:u32 head_crc:u32 | msgpack map

All integers are little-endian; `head_crc` is the CRC32 of the header bytes before it.
"""

from __future__ import annotations

import mmap
import struct
import zlib
from dataclasses import dataclass
from typing import Any

import msgpack
import numpy as np

MAGIC = b"\x89RIGRUN\n"  # PNG-style: a high byte and a newline catch text-mode mangling
VERSION = 1
SUFFIX = ".rigrun"

FILE_HEADER = struct.Struct("<8sHHII")
CHUNK_HEADER = struct.Struct("<4sIIQII")
BLOB_HEADER = struct.Struct("<4sIII")

TAG_CHUNK = b"CHNK"
TAG_EVENT = b"EVNT"
TAG_TRAILER = b"TRLR"
TAGS = (TAG_CHUNK, TAG_EVENT, TAG_TRAILER)

#: Little-endian float64 whatever the host: the file is portable.
DTYPE = np.dtype("<f8")

#: Sanity bounds a header must satisfy before its lengths are believed.
MAX_WIDTH = 65_536
MAX_BLOB = 64 * 1024 * 1024


#: What the decoders read from: bytes in memory or a memory-mapped file.
ByteSource = bytes | memoryview | mmap.mmap


class RunFileError(ValueError):
    """The file is not a readable run file (bad magic, unknown version, damaged header)."""


@dataclass(frozen=True)
class ChunkHeader:
    rows: int
    width: int
    first_seq: int
    body_crc: int

    @property
    def body_size(self) -> int:
        return self.rows * self.width * DTYPE.itemsize


@dataclass(frozen=True)
class BlobHeader:
    tag: bytes
    length: int
    body_crc: int


def pack_msg(obj: Any) -> bytes:
    # Anything msgpack cannot encode (enums, paths, numpy scalars) is stored as its str(): an
    # event is a record for humans and tools, never a reason to lose the event.
    return msgpack.packb(obj, use_bin_type=True, default=_fallback)


def _fallback(obj: Any) -> Any:
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    return str(obj)


def unpack_msg(data: bytes | memoryview) -> Any:
    return msgpack.unpackb(data, raw=False, strict_map_key=False)


def encode_file_header(meta: dict[str, Any]) -> bytes:
    body = pack_msg(meta)
    return FILE_HEADER.pack(MAGIC, VERSION, 0, len(body), zlib.crc32(body)) + body


def decode_file_header(buf: ByteSource) -> tuple[dict[str, Any], int]:
    """Return (meta, size of the header in bytes); raise `RunFileError` if it is not one."""
    start = bytes(buf[: len(MAGIC)])
    if start != MAGIC[: len(start)]:
        raise RunFileError("not a run file (bad magic)")
    if len(buf) < FILE_HEADER.size:
        raise RunFileError(f"file too short for a run header ({len(buf)} bytes)")
    _magic, version, _flags, meta_len, meta_crc = FILE_HEADER.unpack_from(buf, 0)
    if version != VERSION:
        raise RunFileError(f"unsupported run file version {version} (this reader: {VERSION})")
    end = FILE_HEADER.size + meta_len
    if len(buf) < end:
        raise RunFileError("run header truncated (the writer died while starting)")
    body = buf[FILE_HEADER.size : end]
    if zlib.crc32(body) != meta_crc:
        raise RunFileError("run header metadata fails its CRC check")
    meta = unpack_msg(body)
    if not isinstance(meta, dict):
        raise RunFileError("run header metadata is not a map")
    return meta, end


def encode_chunk_header(rows: int, width: int, first_seq: int, body: Any) -> bytes:
    """The 28-byte record header for `body` (a C-contiguous little-endian float64 buffer)."""
    head = CHUNK_HEADER.pack(TAG_CHUNK, rows, width, first_seq, zlib.crc32(body), 0)
    return head[:-4] + struct.pack("<I", zlib.crc32(head[:-4]))


def encode_chunk(first_seq: int, rows: np.ndarray) -> bytes:
    """A whole sample-chunk record (header + payload) for an (n, width) array."""
    if rows.ndim != 2:
        raise ValueError(f"a chunk is a 2-D array of rows, got shape {rows.shape}")
    body = np.ascontiguousarray(rows, dtype=DTYPE).tobytes()
    return encode_chunk_header(rows.shape[0], rows.shape[1], first_seq, body) + body


def decode_chunk_header(buf: ByteSource, offset: int) -> ChunkHeader | None:
    """The chunk header at `offset`, or None if its CRC or bounds are wrong."""
    tag, rows, width, first_seq, body_crc, head_crc = CHUNK_HEADER.unpack_from(buf, offset)
    if tag != TAG_CHUNK or zlib.crc32(buf[offset : offset + CHUNK_HEADER.size - 4]) != head_crc:
        return None
    if not 0 < width <= MAX_WIDTH:
        return None
    return ChunkHeader(rows, width, first_seq, body_crc)


def decode_chunk(record: ByteSource) -> tuple[int, np.ndarray]:
    """(first_seq, rows) of a whole chunk record; raise `RunFileError` if it is damaged."""
    if len(record) < CHUNK_HEADER.size:
        raise RunFileError("chunk record truncated in its header")
    head = decode_chunk_header(record, 0)
    if head is None:
        raise RunFileError("chunk header fails its CRC check")
    body = record[CHUNK_HEADER.size : CHUNK_HEADER.size + head.body_size]
    if len(body) < head.body_size:
        raise RunFileError("chunk record truncated in its payload")
    if zlib.crc32(body) != head.body_crc:
        raise RunFileError("chunk payload fails its CRC check")
    data = np.frombuffer(body, dtype=DTYPE).reshape(head.rows, head.width)
    return head.first_seq, data.astype(np.float64)


def encode_blob(tag: bytes, obj: dict[str, Any]) -> bytes:
    """An event or trailer record: header + msgpack body."""
    if tag not in (TAG_EVENT, TAG_TRAILER):
        raise ValueError(f"not a blob record tag: {tag!r}")
    body = pack_msg(obj)
    head = struct.pack("<4sII", tag, len(body), zlib.crc32(body))
    return head + struct.pack("<I", zlib.crc32(head)) + body


def decode_blob_header(buf: ByteSource, offset: int) -> BlobHeader | None:
    tag, length, body_crc, head_crc = BLOB_HEADER.unpack_from(buf, offset)
    if tag not in (TAG_EVENT, TAG_TRAILER):
        return None
    if zlib.crc32(buf[offset : offset + BLOB_HEADER.size - 4]) != head_crc:
        return None
    if length > MAX_BLOB:
        return None
    return BlobHeader(tag, length, body_crc)
