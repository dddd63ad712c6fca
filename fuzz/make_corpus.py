#!/usr/bin/env python3
"""Writes the seed corpora of the bootstrap frame fuzzers (fuzz/corpus/boot_frame,
fuzz/corpus/boot_hello) in the wire format of src/core/boot/bootstrap_frame.h,
and those of the codec round trips (fuzz/corpus/codec, the input layout at the
top of fuzz/fuzz_codec.cc).
Run from anywhere; overwrites the seeds it names and leaves others alone."""
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))
MAGIC, VERSION = 0x66426454, 2
CHALLENGE, HELLO, STATUS, TABLE, RING, GATHER, BARRIER = range(1, 8)


def header(ftype, length, version=VERSION, magic=MAGIC, flags=0, reserved=0):
    return struct.pack('<IHBBII', magic, version, ftype, flags, length, reserved)


def addr(port, v6=False):
    if v6:
        return struct.pack('<HH', 10, port) + bytes(15) + b'\x01'
    return struct.pack('<HH', 2, port) + bytes([127, 0, 0, 1]) + bytes(12)


def hello(rank, nranks, port=4242, v6=False):
    return struct.pack('<ii', rank, nranks) + addr(port, v6) + bytes(range(32))


def frame(ftype, payload):
    return header(ftype, len(payload)) + payload


def limits(ftype, nranks=0, block=0):
    # Selector byte: expected type = 1 + selector % 7.
    return bytes([ftype - 1]) + struct.pack('<iI', nranks, block)


def write(target, name, data):
    d = os.path.join(HERE, 'corpus', target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), 'wb') as f:
        f.write(data)


table4 = b''.join(addr(5000 + r) for r in range(4))
frames = {
    'challenge': limits(CHALLENGE) + frame(CHALLENGE, bytes(range(16))),
    'hello': limits(HELLO) + frame(HELLO, hello(1, 4)),
    'ring_hello': limits(RING) + frame(RING, struct.pack('<ii', 0, 2) + bytes(52)),
    'status_refused': limits(STATUS) + frame(STATUS, struct.pack('<i', 2)),
    'status_table': limits(TABLE, 4) + frame(TABLE, table4),
    'gather_two_blocks': limits(GATHER, 0, 8) + frame(GATHER, b'abcdefgh') * 2,
    'barrier_stream': limits(BARRIER) + frame(BARRIER, b'\x00') * 3,
    'length_ffffffff': limits(HELLO) + header(HELLO, 0xFFFFFFFF),
    'table_oversized': limits(TABLE, 4) + header(TABLE, 0xFFFFFFFF) + table4,
    'table_too_many_ranks': limits(TABLE, (1 << 20) + 1) + header(TABLE, 20),
    'wrong_version': limits(HELLO) + header(HELLO, 60, version=3) + hello(0, 2),
    'version1_peer': limits(CHALLENGE) + b'tooBedit' + bytes(16),
    'wrong_type': limits(HELLO) + frame(TABLE, table4),
    'flags_set': limits(STATUS) + header(STATUS, 4, flags=0x80) + bytes(4),
    'truncated': limits(HELLO) + frame(HELLO, hello(1, 4))[:40],
}
for name, data in frames.items():
    write('boot_frame', name, data)

hellos = {
    'valid_r0_of4': frame(HELLO, hello(0, 4)) + struct.pack('<i', 4),
    'valid_v6': frame(HELLO, hello(1, 2, v6=True)),
    'bad_rank': frame(HELLO, hello(-5, 4)) + struct.pack('<i', 4),
    'nranks_mismatch': frame(HELLO, hello(1, 8)) + struct.pack('<i', 4),
    'length_ffffffff': header(HELLO, 0xFFFFFFFF) + hello(0, 4),
    'truncated': frame(HELLO, hello(0, 4))[:30],
    'wrong_version': header(HELLO, 60, version=1) + hello(0, 4),
    'zeros': bytes(80),
}
for name, data in hellos.items():
    write('boot_hello', name, data)


# Codec seeds: selector (0 fp16, 1 bf16, 2 int8, 3 int4, 4 top-k), block or k
# (little-endian uint16, used as 1 + value % 1024), flags (1 stochastic,
# 2 feedback), seed, counter, then float32 elements.
def codec(which, param, flags, floats, seed=7, counter=0):
    head = struct.pack('<BHBII', which, param - 1, flags, seed, counter)
    return head + struct.pack('<%df' % len(floats), *floats)


INF, NAN = float('inf'), float('nan')
ramp = [((i * 37) % 101 - 50) * 0.01 for i in range(300)]
codecs = {
    'fp16_specials': codec(0, 1, 0, [1.0, 65504.0, 65520.0, 1e10, -1e10, INF, -INF, NAN,
                                     2.0 ** -24, 2.0 ** -25, 1.0 + 2.0 ** -11, -0.0]),
    'bf16_specials': codec(1, 1, 0, [1.0, 3.4e38, -3.4e38, INF, NAN, 1.0 + 2.0 ** -8, 1e-40]),
    'int8_ramp_b64': codec(2, 64, 0, ramp),
    'int8_sr_feedback_b7': codec(2, 7, 3, ramp[:50]),
    'int8_outlier_zero': codec(2, 4, 0, [1000, 1, 2, 3, 0, 0, -0.0, 0, 1e-36, -2e-36, 0, 0]),
    'int8_nonfinite': codec(2, 4, 2, [1, NAN, 2, 3, 1, INF, -INF, 2, 4, 5, 6, 7]),
    'int4_odd_block': codec(3, 3, 1, ramp[:31]),
    'int4_ties': codec(3, 8, 0, [7, -7, 0.5, 1.5, -2.5, 3, -3.5, 6.49, 0.4]),
    'topk_ties': codec(4, 3, 0, [1, -5, 3, -3, 0, 5, 5, -5]),
    'topk_specials': codec(4, 2, 0, [INF, 1, NAN, -INF, -0.0, 0.0]),
}
for name, data in codecs.items():
    write('codec', name, data)
