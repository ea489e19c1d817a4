"""Reads a TensorBoard event file without TensorFlow or protobuf, as an independent check of
libs/base/tensorboard_writer: every record's framing and both masked CRC-32C are verified (a
bitwise CRC here, not the writer's table), each Event decoded from its wire format. Prints one
JSON list: {"wall_time", "step", "file_version"} or {"wall_time", "step", "tag", "value"}.

    read_tfevents.py EVENTS_FILE
"""
import json
import struct
import sys


def crc32c(data: bytes) -> int:
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def varint(buf: bytes, i: int):
    shift = value = 0
    while True:
        b = buf[i]
        i += 1
        value |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return value, i


def fields(buf: bytes):
    """(field number, wire type, value) of one message: ints, bytes, or raw fixed bytes."""
    i = 0
    while i < len(buf):
        key, i = varint(buf, i)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, i = varint(buf, i)
        elif wire == 1:
            value, i = buf[i:i + 8], i + 8
        elif wire == 2:
            n, i = varint(buf, i)
            value, i = buf[i:i + n], i + n
        elif wire == 5:
            value, i = buf[i:i + 4], i + 4
        else:
            raise ValueError(f"wire type {wire}")
        yield number, wire, value


def main(path: str) -> None:
    data = open(path, "rb").read()
    out, i = [], 0
    while i < len(data):
        header = data[i:i + 8]
        (length,) = struct.unpack("<Q", header)
        (length_crc,) = struct.unpack("<I", data[i + 8:i + 12])
        if length_crc != masked(header):
            raise SystemExit(f"record at {i}: length CRC mismatch")
        body = data[i + 12:i + 12 + length]
        (body_crc,) = struct.unpack("<I", data[i + 12 + length:i + 16 + length])
        if body_crc != masked(body):
            raise SystemExit(f"record at {i}: data CRC mismatch")
        i += 16 + length
        event = {"step": 0}
        for number, wire, value in fields(body):
            if number == 1 and wire == 1:
                event["wall_time"] = struct.unpack("<d", value)[0]
            elif number == 2 and wire == 0:
                event["step"] = value - (1 << 64) if value >= 1 << 63 else value
            elif number == 3 and wire == 2:
                event["file_version"] = value.decode()
            elif number == 5 and wire == 2:
                for n, w, v in fields(value):  # Summary.value
                    assert n == 1 and w == 2, (n, w)
                    for vn, vw, vv in fields(v):
                        if vn == 1:
                            event["tag"] = vv.decode()
                        elif vn == 2 and vw == 5:
                            event["value"] = struct.unpack("<f", vv)[0]
            else:
                raise SystemExit(f"unexpected field {number} (wire type {wire})")
        out.append(event)
    print(json.dumps(out))


if __name__ == "__main__":
    main(sys.argv[1])
