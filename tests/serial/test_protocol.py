"""Framing, CRC and payloads of docs/serial_protocol.md, byte for byte."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from daq.backends import serial_protocol as sp

DOC = Path(__file__).resolve().parents[2] / "docs" / "serial_protocol.md"


def hx(text: str) -> bytes:
    return bytes.fromhex(text.replace("|", " "))


def _crc_bitwise(data: bytes) -> int:
    """The C routine of the document, transcribed: an independent check of crc_hqx."""
    crc = 0xFFFF
    for b in data:
        crc ^= b << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021) if crc & 0x8000 else (crc << 1)
            crc &= 0xFFFF
    return crc


def test_crc_check_value() -> None:
    assert sp.crc16(b"123456789") == 0x29B1
    assert _crc_bitwise(b"123456789") == 0x29B1


@given(st.binary(max_size=64))
def test_crc_matches_the_documented_routine(data: bytes) -> None:
    assert sp.crc16(data) == _crc_bitwise(data)


def test_worked_examples_of_the_document() -> None:
    assert sp.encode_frame(sp.SAMPLE, 0x2A) == hx("A5 5A 00 03 2A E7 1C")
    sample = sp.Sample(0, 0x1234, (10012, 9557), (0, sp.FAULT_LOS))
    assert sp.encode_frame(sp.SAMPLE_RSP, 0x2A, sample.encode()) == hx(
        "A5 5A 0A 83 2A | 00 02 34 12 | 1C 27 00 | 55 25 40 | 49 0C"
    )
    ok = sp.Sample(0, 0x1234, (10012, 9557), (0, 0))
    assert sp.encode_frame(sp.SAMPLE_RSP, 0x2A, ok.encode())[-5:] == hx("55 25 00 8D 44")
    assert sp.encode_frame(sp.IDENTIFY, 1) == hx("A5 5A 00 01 01 8C EF")
    ident = sp.Identity(1, 8, 2, 14, 0x0100, 0x52443031)
    assert sp.encode_frame(sp.IDENTIFY_RSP, 1, ident.encode()) == hx(
        "A5 5A 0A 81 01 01 08 02 0E 00 01 31 30 44 52 8F AD"
    )
    assert sp.encode_frame(sp.CONFIGURE, 2, sp.encode_configure(2, 14)) == hx(
        "A5 5A 02 02 02 02 0E 2B 51"
    )
    assert sp.encode_frame(sp.CONFIGURE_RSP, 2, sp.encode_configure(2, 14)) == hx(
        "A5 5A 02 82 02 02 0E 13 8C"
    )
    nak = sp.encode_nak(sp.NAK_BAD_PARAMETER, sp.CONFIGURE)
    assert sp.encode_frame(sp.NAK, 3, nak) == hx("A5 5A 02 FF 03 03 02 6D 32")


def test_every_example_frame_in_the_document_has_a_valid_crc() -> None:
    frames = re.findall(r"A5 5A(?: [|0-9A-F]{1,2})+", DOC.read_text())
    assert len(frames) >= 7
    for text in frames:
        f = sp.decode_frame(hx(text))  # raises on a bad CRC or length
        assert len(f.payload) == hx(text)[2]


def test_timing_table_of_the_document() -> None:
    doc = DOC.read_text()
    for n in (1, 2, 4, 8):
        wire = sp.frame_time_s(7 + sp.sample_frame_len(n), 921600)
        assert f"| {n} | {sp.sample_frame_len(n)} | {round(wire * 1e6)} µs |" in doc


@given(
    st.integers(0, 255),
    st.integers(0, 0xFFFF),
    st.lists(st.tuples(st.integers(0, 0xFFFF), st.integers(0, 255)), min_size=1, max_size=8),
    st.integers(0, 255),
)
def test_sample_round_trip(status: int, tick: int, items: list[tuple[int, int]], seq: int) -> None:
    s = sp.Sample(status, tick, tuple(p for p, _ in items), tuple(f for _, f in items))
    frame = sp.encode_frame(sp.SAMPLE_RSP, seq, s.encode())
    assert len(frame) == sp.sample_frame_len(len(items))
    f = sp.decode_frame(frame)
    assert (f.msg_type, f.seq) == (sp.SAMPLE_RSP, seq)
    assert sp.Sample.decode(f.payload) == s


def test_decode_rejects_corruption_with_a_reason() -> None:
    good = sp.encode_frame(sp.SAMPLE, 7)
    with pytest.raises(sp.ProtocolError, match="CRC mismatch"):
        sp.decode_frame(good[:-1] + bytes([good[-1] ^ 1]))
    with pytest.raises(sp.ProtocolError, match="sync"):
        sp.decode_frame(b"\x00" + good[1:])
    with pytest.raises(sp.ProtocolError, match="LEN says"):
        sp.decode_frame(good + b"\x00")
    with pytest.raises(sp.ProtocolError, match="shorter"):
        sp.decode_frame(good[:4])
    with pytest.raises(sp.ProtocolError, match="says 3 resolvers"):
        sp.Sample.decode(bytes([0, 3, 0, 0]))


# Garbage without SYNC0: a stray "A5 5A <LEN>" would make the parser wait for LEN bytes that the
# board's inter-frame timeout (not modelled by the pure parser) discards.
@given(st.binary(max_size=40).filter(lambda b: b"\xa5" not in b), st.integers(0, 255))
def test_parser_resynchronises_after_garbage(garbage: bytes, seq: int) -> None:
    frame = sp.encode_frame(sp.CONFIGURE, seq, sp.encode_configure(2, 14))
    corrupt = frame[:-1] + bytes([frame[-1] ^ 0x55])
    p = sp.FrameParser()
    got = []
    # Byte by byte, as a UART delivers it: a garbage prefix, a corrupted frame, a good one.
    for b in garbage + corrupt + frame:
        got += p.feed(bytes([b]))
    assert got[-1] == sp.Frame(sp.CONFIGURE, seq, sp.encode_configure(2, 14))
    assert p.crc_errors >= 1
