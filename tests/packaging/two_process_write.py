"""A two-process write with the installed package, run from outside the
source tree by tests/packaging/wheel.sh: the receiver registers a buffer and
arms an immediate counter, the sender writes 1 MiB with that immediate, the
receiver checks every byte. It also checks which library was loaded (the
wheel's own copy) and that the versions agree. Plain bytearrays: the wheel
has no dependencies, so the test installs none."""
import importlib.metadata
import multiprocessing as mp
import os
import sys

import xfer

KW = dict(provider="tcp", nics="lo")
N = 1 << 20
IMM = 7


def pattern() -> bytes:
    return bytes((i * 131 + 17) & 0xFF for i in range(N))


def receiver(conn) -> None:
    with xfer.Engine(**KW) as eng:
        conn.send_bytes(eng.address)
        eng.add_peer(conn.recv_bytes())
        buf = bytearray(N)
        region = eng.register(buf)
        done = eng.expect_imm(IMM, count=1)
        conn.send_bytes(region.descriptor)
        done.result(timeout=60)
        conn.send_bytes(b"ok" if bytes(buf) == pattern() else b"corrupt")
        region.close()


def main() -> int:
    site = os.path.dirname(os.path.dirname(os.path.abspath(xfer.__file__)))
    assert not any(k.startswith("XFER_") for k in os.environ), "an XFER_* variable is set"
    assert xfer.LIBRARY_PATH.startswith(site), f"{xfer.LIBRARY_PATH} is not the wheel's copy in {site}"
    assert xfer.__version__ == xfer.LIBRARY_VERSION == importlib.metadata.version("xfer"), (
        xfer.__version__, xfer.LIBRARY_VERSION, importlib.metadata.version("xfer"))
    ctx = mp.get_context("spawn")
    a, b = ctx.Pipe()
    p = ctx.Process(target=receiver, args=(b,))
    p.start()
    try:
        with xfer.Engine(**KW) as eng:
            peer = eng.add_peer(a.recv_bytes())
            a.send_bytes(eng.address)
            dst = eng.import_region(peer, a.recv_bytes())
            src_buf = bytearray(pattern())
            src = eng.register(src_buf)
            eng.write(src, dst, imm=IMM).result(timeout=60)
            verdict = a.recv_bytes()
            src.close()
            dst.close()
    finally:
        p.join(60)
    print(f"two_process_write: {N} bytes over {KW['provider']}, receiver says {verdict.decode()}, "
          f"library {xfer.LIBRARY_PATH} ({xfer.LIBRARY_VERSION})")
    return 0 if verdict == b"ok" and p.exitcode == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
