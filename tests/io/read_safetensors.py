#!/usr/bin/env python3
"""An independent safetensors reader, written from the format's specification with the Python
standard library only, applying the checks of the reference implementation (Hugging Face's
`safetensors`, which PyTorch users load files with): the 8-byte little-endian header length,
at most 100 MB of UTF-8 JSON starting with '{', an optional string-to-string __metadata__,
and tensors whose data_offsets, sorted, tile the data section exactly (no gap, no overlap,
nothing left over) with end - start = numel * element size.

    read_safetensors.py FILE EXPECTED.json

EXPECTED.json maps each tensor name to {"dtype", "shape", "values" (flat, row-major)} and may
hold "__metadata__". Exits 0 when the file is valid and holds exactly that, else prints the
first problem and exits 1.
"""
import json
import math
import struct
import sys

MAX_HEADER = 100_000_000
# dtype name -> (element size, struct format code)
# (BF16 has no struct code: its two bytes are the top half of a little-endian float32.)
DTYPES = {"F64": (8, "d"), "F32": (4, "f"), "F16": (2, "e"), "BF16": (2, None), "I64": (8, "q"),
          "I32": (4, "i"), "I16": (2, "h"), "I8": (1, "b"), "U8": (1, "B"), "BOOL": (1, "?")}


def fail(msg):
    print("read_safetensors.py: " + msg)
    sys.exit(1)


def parse(blob):
    if len(blob) < 8:
        fail("file shorter than the 8-byte header length")
    (n,) = struct.unpack("<Q", blob[:8])
    if n > MAX_HEADER:
        fail("header of %d bytes exceeds the 100 MB limit" % n)
    if 8 + n > len(blob):
        fail("header length %d runs past the end of the file" % n)
    raw = blob[8 : 8 + n]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        fail("header is not UTF-8: %s" % e)
    if not text.startswith("{"):
        fail("header does not start with '{'")
    header = json.loads(text)  # trailing spaces (padding) are valid JSON whitespace
    data = blob[8 + n :]
    metadata = header.pop("__metadata__", None)
    if metadata is not None:
        if not isinstance(metadata, dict) or not all(
            isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()
        ):
            fail("__metadata__ must map strings to strings")
    entries = []
    for name, info in header.items():
        if set(info) != {"dtype", "shape", "data_offsets"}:
            fail("tensor %r has fields %s" % (name, sorted(info)))
        dtype, shape, (begin, end) = info["dtype"], info["shape"], info["data_offsets"]
        if dtype not in DTYPES:
            fail("tensor %r has an unknown dtype %r" % (name, dtype))
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            fail("tensor %r has a bad shape %r" % (name, shape))
        if not (0 <= begin <= end):
            fail("tensor %r has bad offsets %r" % (name, info["data_offsets"]))
        if math.prod(shape) * DTYPES[dtype][0] != end - begin:
            fail("tensor %r: %s %r does not fill [%d, %d)" % (name, dtype, shape, begin, end))
        entries.append((begin, end, name, dtype, shape))
    entries.sort()
    pos = 0
    for begin, end, name, _, _ in entries:
        if begin != pos:
            fail("tensor %r starts at %d, expected %d (gap or overlap)" % (name, begin, pos))
        pos = end
    if pos != len(data):
        fail("tensors cover %d bytes of a %d-byte data section" % (pos, len(data)))
    tensors = {}
    for begin, end, name, dtype, shape in entries:
        size, code = DTYPES[dtype]
        chunk = data[begin:end]
        if dtype == "BOOL" and any(b > 1 for b in chunk):
            fail("tensor %r holds a bool byte other than 0 or 1" % name)
        if dtype == "BF16":
            values = [struct.unpack("<f", b"\0\0" + chunk[i:i + 2])[0]
                      for i in range(0, len(chunk), 2)]
        else:
            values = list(struct.unpack("<%d%s" % (len(chunk) // size, code), chunk))
        tensors[name] = {"dtype": dtype, "shape": shape, "values": values}
    return metadata, tensors


def main():
    if len(sys.argv) != 3:
        fail("usage: read_safetensors.py FILE EXPECTED.json")
    with open(sys.argv[1], "rb") as f:
        metadata, tensors = parse(f.read())
    with open(sys.argv[2]) as f:
        expected = json.load(f)
    want_meta = expected.pop("__metadata__", None)
    if want_meta is not None and metadata != want_meta:
        fail("metadata %r, expected %r" % (metadata, want_meta))
    if set(tensors) != set(expected):
        fail("tensor names %s, expected %s" % (sorted(tensors), sorted(expected)))
    for name, want in expected.items():
        got = tensors[name]
        if got["dtype"] != want["dtype"] or got["shape"] != want["shape"]:
            fail("%r is %s %r, expected %s %r"
                 % (name, got["dtype"], got["shape"], want["dtype"], want["shape"]))
        for i, (g, w) in enumerate(zip(got["values"], want["values"])):
            # F32, F16 and BF16 values decode to the same double the writer widened them to:
            # exact equality (NaN, which JSON lacks, is written as the string "nan").
            if w == "nan" and g != g:
                continue
            if g != w:
                fail("%r[%d] = %r, expected %r" % (name, i, g, w))
        if len(got["values"]) != len(want["values"]):
            fail("%r has %d values, expected %d" % (name, len(got["values"]), len(want["values"])))
    print("read_safetensors.py: %d tensors valid and equal" % len(expected))


if __name__ == "__main__":
    main()
