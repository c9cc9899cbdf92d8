"""The integrity of checkpoint zips on the Python side (tools/fairseq-import, tools/fairseq-export),
as fairseq_cpp/checkpoint/integrity.cpp does it in C++.

torch.load does not check the CRC-32 that the zip stores for each record, so a flipped byte in a
weight loads as a wrong weight. verify() checks every record's CRC and, when the zip comment holds
fairseq-cpp's digest ("fairseq-cpp sha256:<hex>"), the SHA-256 of every byte before the comment's
length. add_digest() ends a zip just written with that digest, as fairseq-cpp's save does.
"""
import hashlib
import struct
import zipfile

PREFIX = b"fairseq-cpp sha256:"
_BLOCK = 1 << 22


class Damaged(Exception):
    pass


def _sha256(f, n):
    h = hashlib.sha256()
    f.seek(0)
    while n > 0:
        chunk = f.read(min(n, _BLOCK))
        if not chunk:
            break
        h.update(chunk)
        n -= len(chunk)
    return h.hexdigest()


def add_digest(f):
    """Ends the zip just written to `f` (a binary file open for reading and writing, the whole
    zip, no comment yet) with the digest as its comment."""
    f.flush()
    size = f.seek(0, 2)
    f.seek(size - 2)
    if size < 22 or f.read(2) != b"\0\0":
        raise ValueError("add_digest: the zip does not end with an empty comment")
    comment = PREFIX + _sha256(f, size - 2).encode()
    f.seek(size - 2)
    f.write(struct.pack("<H", len(comment)) + comment)
    f.flush()


def verify(path):
    """Raises Damaged (with a one-line message naming the file and the record) when a zip
    checkpoint's bytes changed. Files in torch's legacy (pre-1.6, not zip) format have no CRCs:
    nothing to check."""
    if not zipfile.is_zipfile(path):
        return
    try:
        with zipfile.ZipFile(path) as z:
            bad = z.testzip()
            comment = z.comment
    except (zipfile.BadZipFile, OSError, EOFError, ValueError) as e:
        raise Damaged(f"{path} is damaged and was not used: {str(e).splitlines()[0] if str(e) else type(e).__name__}")
    if bad is not None:
        raise Damaged(f"{path} is damaged and was not used: record {bad}: its bytes' CRC-32 is not the one the zip stores")
    if comment and (not comment.startswith(PREFIX) or len(comment) != len(PREFIX) + 64):
        raise Damaged(f"{path} is damaged and was not used: its zip comment is not fairseq-cpp's digest")
    if comment:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            if _sha256(f, size - 2 - len(comment)) != comment[len(PREFIX):].decode("ascii", "replace"):
                raise Damaged(f"{path} is damaged and was not used: its SHA-256 is not the one it was saved with")
