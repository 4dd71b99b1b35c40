"""Bounds on a request's shape, checked on the raw msgpack bytes before anything is decoded.

Why a pre-scan: msgpack's decoder builds every object it meets, so a 500 kB map of tiny pairs
or an array nested a thousand deep costs its full decode (~100 ms for the former, measured in
issue #15) before the server could tell it is nonsense. The scan below walks the type headers
only — a string or bin is skipped by its length in O(1) — and stops at the first bound crossed,
so its work is bounded by `MAX_ITEMS` header reads whatever the frame holds. A frame the scan
cannot follow (truncated, reserved byte 0xc1) is left to the decoder, which reports it as
`bad_msgpack`; the decoder is given the same per-container limits as a second line.
"""

from __future__ import annotations

from daq.commands.errors import CommandError

#: Containers inside containers (an experiment map is ~6 deep: segments → trajectory → n×K).
MAX_DEPTH = 16
#: Entries in one map (an experiment has tens).
MAX_MAP_LEN = 1024
#: Items in one array (multisine/MFS tables: joints × harmonics, tens to hundreds).
MAX_ARRAY_LEN = 4096
#: Objects of any kind in one request (every key, value and item counts once).
MAX_ITEMS = 16384

# Bytes that follow a fixed-size header, by first byte (0 where the byte is a complete object).
_FIXED = {
    0xC0: 0,
    0xC2: 0,
    0xC3: 0,
    0xCA: 4,
    0xCB: 8,
    0xCC: 1,
    0xCD: 2,
    0xCE: 4,
    0xCF: 8,
    0xD0: 1,
    0xD1: 2,
    0xD2: 4,
    0xD3: 8,
    0xD4: 2,
    0xD5: 3,
    0xD6: 5,
    0xD7: 9,
    0xD8: 17,
}
# str/bin/ext with an explicit length: first byte → (length bytes, extra bytes after it).
_SIZED = {
    0xC4: (1, 0),
    0xC5: (2, 0),
    0xC6: (4, 0),
    0xC7: (1, 1),
    0xC8: (2, 1),
    0xC9: (4, 1),
    0xD9: (1, 0),
    0xDA: (2, 0),
    0xDB: (4, 0),
}
# array/map with an explicit length: first byte → (length bytes, is a map).
_CONTAINERS = {0xDC: (2, False), 0xDD: (4, False), 0xDE: (2, True), 0xDF: (4, True)}


def _too_complex(what: str) -> CommandError:
    return CommandError("too_complex", what)


def check_shape(body: bytes) -> None:
    """Raise `CommandError('too_complex')` if `body` nests deeper than MAX_DEPTH, holds a map
    longer than MAX_MAP_LEN, an array longer than MAX_ARRAY_LEN, or more than MAX_ITEMS
    objects. Malformed input is not judged here (the decoder refuses it)."""
    n = len(body)
    pos = 0
    items = 0
    # Objects still to read at each open level; the outermost level holds one object.
    left = [1]
    while left:
        if left[-1] == 0:
            left.pop()
            continue
        left[-1] -= 1
        if pos >= n:
            return  # truncated: the decoder says so
        b = body[pos]
        pos += 1
        items += 1
        if items > MAX_ITEMS:
            raise _too_complex(f"more than {MAX_ITEMS} objects in one request")
        if b <= 0x7F or b >= 0xE0:  # positive/negative fixint
            continue
        if b <= 0x9F:  # fixmap 0x80–0x8f, fixarray 0x90–0x9f
            is_map = b <= 0x8F
            count = b & 0x0F
        elif b <= 0xBF:  # fixstr
            pos += b & 0x1F
            continue
        elif b in _FIXED:
            pos += _FIXED[b]
            continue
        elif b in _SIZED:
            width, extra = _SIZED[b]
            pos += width + extra + int.from_bytes(body[pos : pos + width], "big")
            continue
        elif b in _CONTAINERS:
            width, is_map = _CONTAINERS[b]
            count = int.from_bytes(body[pos : pos + width], "big")
            pos += width
        else:
            return  # 0xc1 (never used): the decoder refuses it
        limit = MAX_MAP_LEN if is_map else MAX_ARRAY_LEN
        if count > limit:
            kind = "map" if is_map else "array"
            raise _too_complex(f"a {kind} of {count} entries (at most {limit})")
        if len(left) > MAX_DEPTH:
            raise _too_complex(f"containers nested deeper than {MAX_DEPTH}")
        left.append(2 * count if is_map else count)
