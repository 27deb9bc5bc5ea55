#!/usr/bin/env python3
"""Writes the hostile seed archives of the archive_fuzz target from a real export.

Usage: make_archive_seeds.py tests/fuzz/corpus/archive   (reads one-entry.tar there: an
uncompressed `kforge cache export`). Each seed is that archive with one thing wrong, as an
archive from another machine could be: a member name that climbs out or is absolute, a
symlink or hard link where a file goes, a device, a duplicate member, a member cut short,
a size field larger than the archive, and an index that lists a file the entry lacks.
"""
import io
import json
import pathlib
import sys
import tarfile

out = pathlib.Path(sys.argv[1])
src = tarfile.open(out / "one-entry.tar")
members = [(m, src.extractfile(m).read() if m.isfile() else b"") for m in src.getmembers()]
entry = next(m.name for m, _ in members if m.name.endswith("/manifest.json")).rsplit("/", 1)[0]


def write(name, items, fmt=tarfile.PAX_FORMAT):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=fmt) as t:
        for info, data in items:
            t.addfile(info, io.BytesIO(data) if info.isfile() else None)
    (out / name).write_bytes(buf.getvalue())


def file_member(name, data):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    info.mode = 0o644
    return info, data


def replaced(name, make):
    items = []
    for m, data in members:
        items.append(make(m, data) if m.name == name else (m, data))
    return items


so = entry + "/kernel.so"
write("traversal.tar", members + [file_member("../../escaped", b"x")])
write("traversal-in-entry.tar", replaced(so, lambda m, d: file_member(entry + "/../../../escaped.so", d)))
write("absolute.tar", members + [file_member("/tmp/kforge-absolute", b"x")])


def link(kind):
    def make(m, d):
        info = tarfile.TarInfo(m.name)
        info.type = kind
        info.linkname = "/etc/passwd"
        return info, b""
    return make


write("symlink.tar", replaced(so, link(tarfile.SYMTYPE)))
write("hardlink.tar", replaced(so, link(tarfile.LNKTYPE)))
def device(m, d):
    info = tarfile.TarInfo(m.name)
    info.type = tarfile.CHRTYPE
    return info, b""


write("device.tar", replaced(so, device))
write("duplicate.tar", members + [(m, d) for m, d in members if m.name == so])
whole = (out / "one-entry.tar").read_bytes()
(out / "truncated.tar").write_bytes(whole[: len(whole) // 2])
huge = bytearray(whole)
# The first header's size field (offset 124, 11 octal digits) says 8 GiB; its checksum
# (offset 148) is made again so that the header itself is valid.
huge[124:136] = b"77777777777\0"
huge[148:156] = b" " * 8
huge[148:156] = b"%06o\0 " % sum(huge[0:512])
(out / "huge-size.tar").write_bytes(bytes(huge))
index = json.loads(next(d for m, d in members if m.name == "kforge-export.json"))
index["entries"][0]["files"]["extra.bin"] = {"sha256": "0" * 64, "bytes": 1}
write("lying-index.tar", replaced("kforge-export.json", lambda m, d: file_member(m.name, json.dumps(index).encode())))
print("wrote", sorted(p.name for p in out.iterdir()))
