#!/usr/bin/env python3
"""A keep-alive HTTP/1.1 load client that is not drainscope code.

It knows only what any client knows: the Service addresses it is told to
load (a ClusterIP:port, as a user would give it), its own local address,
when each request started and ended, and what went wrong. It uses Python's
http.client as an application would: one connection per worker, reused for
every request until it fails or the server asks to close it, no retries.

Targets arrive through a file the caller appends to while the client runs:

    add 10.96.0.12:80     start loading this address
    del 10.96.0.12:80     stop dialling it; open connections finish their
                          current use and are not dialled again once they fail

Every request is logged as one JSON line (drainscope's generic jsonl
format): time (RFC 3339 with nanoseconds, at the END of the request),
target, status (when a response came), error, client (local ip:port),
duration_ms. For the caller's own checks only, x_pod holds the X-Pod header
of the last answer on that connection (empty on a connection that never
answered); drainscope's importer ignores it.

SIGTERM or SIGINT stops the client after the requests in flight end, or
once the request timeout and two seconds more have passed: a request still
in flight then is not logged, and its target and local address are named on
stderr.
"""

import argparse
import http.client
import json
import os
import signal
import socket
import sys
import threading
import time

stop = threading.Event()
log_lock = threading.Lock()
inflight = {}  # a worker's thread id: the target and connection of its request


def rfc3339(ns):
    s, frac = divmod(ns, 1_000_000_000)
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(s)) + ".%09dZ" % frac


class Conn(http.client.HTTPConnection):
    """HTTPConnection that binds its socket before connecting, so the local
    address is known even when the connection is refused."""

    def __init__(self, host, port, source, timeout):
        super().__init__(host, port, timeout=timeout)
        self.source = source
        self.local = ""

    def connect(self):
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            s.settimeout(self.timeout)
            s.bind((self.source, 0))
            ip, port = s.getsockname()
            self.local = "%s:%d" % (ip, port)
            s.connect((self.host, self.port))
            # Unbound (0.0.0.0), the address is the route's source, known
            # once connected.
            ip, port = s.getsockname()
            self.local = "%s:%d" % (ip, port)
            s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        except BaseException:
            s.close()
            raise
        self.sock = s


class Target:
    def __init__(self, addr):
        self.addr = addr
        host, port = addr.rsplit(":", 1)
        self.host, self.port = host, int(port)
        self.retired = threading.Event()


def worker(t, idx, args, out):
    # Spread the workers over one interval so they do not move in step.
    if stop.wait(args.interval * idx / args.conns):
        return
    conn, pod = None, ""
    while not stop.is_set():
        if conn is None:
            if t.retired.is_set():
                return
            conn, pod = Conn(t.host, t.port, args.source, args.timeout), ""
        used = conn  # conn is dropped after a failure; its local address stays here
        inflight[threading.get_ident()] = (t.addr, used)
        start = time.monotonic_ns()
        rec = {"target": t.addr}
        try:
            conn.request("GET", "/", headers={"User-Agent": "keepalive-client.py"})
            resp = conn.getresponse()
            resp.read()
            pod = resp.getheader("X-Pod", pod) or pod
            rec["status"] = resp.status
            rec["error"] = ""
            if resp.will_close:
                conn.close()
                conn = None
        except Exception as e:  # every failure is logged as the client saw it
            rec["error"] = "%s: %s" % (type(e).__name__, e)
            conn.close()
            conn = None
        end_wall = time.time_ns()
        rec["time"] = rfc3339(end_wall)
        rec["duration_ms"] = round((time.monotonic_ns() - start) / 1e6, 3)
        rec["client"] = used.local
        rec["x_pod"] = pod
        inflight.pop(threading.get_ident(), None)
        with log_lock:
            out.write(json.dumps(rec) + "\n")
            out.flush()
        if stop.wait(args.interval):
            break
    if conn is not None:
        conn.close()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", required=True, help="file of add/del lines, read as it grows")
    ap.add_argument("--log", required=True, help="JSON lines output")
    ap.add_argument("--source", default="0.0.0.0", help="local address to bind (default: the route's, known once connected)")
    ap.add_argument("--conns", type=int, default=10, help="keep-alive connections per target")
    ap.add_argument("--interval", type=float, default=0.1, help="pause after each request, seconds")
    ap.add_argument("--timeout", type=float, default=5.0, help="per request, seconds")
    args = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    targets, threads, done = {}, [], 0
    with open(args.log, "a", buffering=1) as out:
        while not stop.is_set():
            try:
                with open(args.targets) as f:
                    lines = f.read().splitlines()
            except FileNotFoundError:
                lines = []
            for line in lines[done:]:
                op, _, addr = line.strip().partition(" ")
                if op == "add" and addr not in targets:
                    t = Target(addr)
                    targets[addr] = t
                    for i in range(args.conns):
                        th = threading.Thread(target=worker, args=(t, i, args, out), daemon=True)
                        th.start()
                        threads.append(th)
                elif op == "del" and addr in targets:
                    targets[addr].retired.set()
            done = len(lines)
            stop.wait(0.05)
        deadline = time.monotonic() + args.timeout + 2
        for th in threads:
            th.join(max(0.0, deadline - time.monotonic()))
        if any(th.is_alive() for th in threads):
            # Held to the end: no worker writes half a line past here.
            log_lock.acquire()
            out.flush()
            for addr, conn in list(inflight.values()):
                print("keepalive-client: a request to %s from %s still in flight at stop, %.1f s after it; not logged"
                      % (addr, conn.local or "(not connected)", args.timeout + 2), file=sys.stderr)
            sys.stderr.flush()
            os._exit(0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
