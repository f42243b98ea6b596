#!/usr/bin/env python3
"""One mycel node for memberlist_bench.sh: runs myceld and speaks the
bench's node contract (see the top of memberlist_bench.sh) on stdout.

mycel_node.py MYCELD NAME PORT SEEDS PKI_DIR WORK_DIR

myceld serves 127.0.0.1:PORT with the node certificate in PKI_DIR (made
from the bench's shared CA by gen-pki.sh) and joins through SEEDS
(comma-separated HOST:PORT, empty for the first node). Member events come
from myceld's log ("member joined", "member failed", "member left"),
stamped when this adapter reads them (CLOCK_MONOTONIC, as mlnode -now);
the pipe adds microseconds. BYTES on SIGUSR1 sums bytes_sent of myceld's
TCP sockets open at that moment (ss -tinp), so bytes of connections
already closed are not counted. myceld dies with this process
(PR_SET_PDEATHSIG), so a SIGKILL of the node kills the daemon too.
myceld's own log lines are copied to this adapter's stderr, each prefixed
with the time it was read.
"""
import ctypes
import json
import os
import re
import signal
import subprocess
import sys
import time

myceld, name, port, seeds, pki, work = sys.argv[1:7]
os.makedirs(work, exist_ok=True)
config = os.path.join(work, "config.json")
with open(config, "w") as f:
    json.dump({"seeds": [s for s in seeds.split(",") if s]}, f)


def now():
    return time.monotonic_ns()


def out(line):
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def die_with_parent():
    libc = ctypes.CDLL("libc.so.6", use_errno=True)
    libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


daemon = subprocess.Popen(
    [myceld, "--node-name", name, "--listen", f"127.0.0.1:{port}",
     "--tls-cert", f"{pki}/server.crt", "--tls-key", f"{pki}/server.key",
     "--tls-ca", f"{pki}/ca.crt", "--state-dir", f"{work}/state",
     "--socket", f"{work}/sock", "--cgroup-subtree", f"mlbench/{name}",
     "--cell-pool", "0", "--config", config],
    stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True,
    preexec_fn=die_with_parent)


def stop(*_):
    daemon.terminate()
    try:
        daemon.wait(5)
    except subprocess.TimeoutExpired:
        daemon.kill()
    sys.exit(0)


def usr1(*_):
    sent, conns = 0, 0
    try:
        ss = subprocess.run(["ss", "-tinpH"], capture_output=True, text=True,
                            timeout=5).stdout
    except Exception:
        ss = ""
    mine = False
    for line in ss.splitlines():
        if not line.startswith((" ", "\t")):
            mine = f"pid={daemon.pid}," in line
            conns += mine
            continue
        m = re.search(r"bytes_sent:(\d+)", line)
        if mine and m:
            sent += int(m.group(1))
    out(f"BYTES {now()} reason=usr1 udp_bytes=0 udp_pkts=0 "
        f"tcp_bytes={sent} tcp_conns={conns}")


signal.signal(signal.SIGTERM, stop)
signal.signal(signal.SIGUSR1, usr1)

# memberlist's DefaultLANConfig, which myceld's "lan" profile equals.
out(f"CONFIG name={name} probe_interval_ms=1000 probe_timeout_ms=500 "
    "indirect_checks=3 suspicion_mult=4 gossip_interval_ms=200 "
    "gossip_nodes=3 push_pull_interval_ms=30000 transport=grpc-mtls")
addr = f"127.0.0.1:{port}"
events = {"member joined": "join", "member failed": "dead",
          "member left": "left"}
for line in daemon.stderr:
    t = now()
    # Every daemon line goes to this adapter's stderr, stamped on the bench's
    # clock (the bench keeps it as nN.err with --keep-logs), for diagnosis.
    sys.stderr.write(f"{t} {line}")
    if 'msg="membership: gossiping over gRPC"' in line:
        out(f"START {t} name={name} addr={addr}")
        out(f"EVENT {t} join {name} {addr}")
        continue
    m = re.search(r'msg="(member [a-z]+)" member=(\S+)', line)
    if m and m.group(1) in events and m.group(2) != name:
        out(f"EVENT {t} {events[m.group(1)]} {m.group(2)} -")
stop()
