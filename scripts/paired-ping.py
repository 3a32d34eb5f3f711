#!/usr/bin/env python3
"""Idle round trips through several routers, taken in turns: ICMP echo requests to DST from
a socket in each network namespace NS (one per router's lab), one namespace after the
other and the order turned every round, GAP seconds between two requests. Each time is
from the send to the kernel's receive stamp of the reply (SO_TIMESTAMPNS), as ping takes
it. Taken in turns, the routers share whatever the machine does meanwhile (a VM's vCPU
woken from idle, another tenant), so that their ratio holds where each one's times move
by half between minutes.

    paired-ping.py [--count N] [--gap S] DST NS [NS ...]

Prints one JSON object: per namespace `n` (replies), `lost`, `p50_ms`, `p99_ms`, `times_ms`.
Needs root (raw sockets, setns)."""

import argparse
import ctypes
import json
import os
import select
import socket
import struct
import sys
import time

CLONE_NEWNET = 0x40000000
SO_TIMESTAMPNS = 35
libc = ctypes.CDLL("libc.so.6", use_errno=True)


def socket_in(ns):
    """A raw ICMP socket of namespace `ns` (/run/netns/NS); this thread goes back to its own."""
    own = os.open("/proc/self/ns/net", os.O_RDONLY)
    theirs = os.open(f"/run/netns/{ns}", os.O_RDONLY)
    try:
        if libc.setns(theirs, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns {ns}")
        s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP)
        s.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    finally:
        if libc.setns(own, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), "setns back")
        os.close(theirs)
        os.close(own)
    return s


def checksum(b):
    if len(b) % 2:
        b += b"\0"
    s = sum(struct.unpack(f"!{len(b) // 2}H", b))
    s = (s >> 16) + (s & 0xFFFF)
    s += s >> 16
    return ~s & 0xFFFF


def echo(s, dst, ident, seq, wait=1.0):
    """One echo request; the round trip in ms, or None if no reply came within `wait`."""
    payload = b"tessera-paired-ping".ljust(56, b".")
    head = struct.pack("!BBHHH", 8, 0, 0, ident, seq)
    pkt = struct.pack("!BBHHH", 8, 0, checksum(head + payload), ident, seq) + payload
    sent = time.clock_gettime_ns(time.CLOCK_REALTIME)
    s.sendto(pkt, (dst, 0))
    deadline = time.monotonic() + wait
    while (left := deadline - time.monotonic()) > 0:
        if not select.select([s], [], [], left)[0]:
            return None
        data, anc, _, _ = s.recvmsg(2048, 1024)
        ihl = (data[0] & 0xF) * 4
        if len(data) < ihl + 8:
            continue
        typ, _, _, i, q = struct.unpack("!BBHHH", data[ihl : ihl + 8])
        if typ != 0 or i != ident or q != seq:
            continue
        for _, kind, d in anc:
            if kind == SO_TIMESTAMPNS and len(d) >= 16:
                sec, ns = struct.unpack("qq", d[:16])
                return (sec * 1_000_000_000 + ns - sent) / 1e6
    return None


def quantile(v, p):
    v = sorted(v)
    return v[min(len(v) - 1, int(len(v) * p))] if v else None


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    a.add_argument("--count", type=int, default=300)
    a.add_argument("--gap", type=float, default=0.005)
    a.add_argument("dst")
    a.add_argument("ns", nargs="+")
    o = a.parse_args()
    socks = [socket_in(n) for n in o.ns]
    times = [[] for _ in o.ns]
    lost = [0 for _ in o.ns]
    base = os.getpid() & 0xFF00
    for k in range(o.count):
        order = list(range(len(o.ns)))
        shift = k % len(order)
        for j in order[shift:] + order[:shift]:
            t = echo(socks[j], o.dst, base | j, k & 0xFFFF)
            if t is None:
                lost[j] += 1
            else:
                times[j].append(round(t, 4))
            time.sleep(o.gap)
    out = {
        n: {
            "n": len(times[j]),
            "lost": lost[j],
            "p50_ms": quantile(times[j], 0.5),
            "p99_ms": quantile(times[j], 0.99),
            "times_ms": times[j],
        }
        for j, n in enumerate(o.ns)
    }
    json.dump(out, sys.stdout)
    print()


if __name__ == "__main__":
    main()
