"""bench/anchors/hivemind.sh's coordinator (standard library only): for each link and each N, makes
N network namespaces with scripts/wan, then for each size all-reduces the same float32 tensor
among them twice in the same run, ours (ravnestd in each namespace, one benchAllReduce) and
Hivemind's (one hivemind_allreduce.py peer in each namespace), and prints one table. Figures,
no assertions, except that Hivemind's peers check their result is the mean.

Bus bandwidth as `ravnest bench allreduce` computes it: bytes * 2(N-1)/N / median seconds.
"""
import argparse
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SIZES = {"KiB": 1024, "MiB": 1 << 20, "GiB": 1 << 30}


def parse_size(text):
    for unit, factor in SIZES.items():
        if text.endswith(unit):
            return int(float(text[:-len(unit)]) * factor)
    return int(text)


def progress(line):
    print("anchors: " + line, file=sys.stderr, flush=True)


def bus_bandwidth(nodes, size, seconds):
    return size * 2.0 * (nodes - 1) / nodes / seconds if seconds > 0 else 0.0


class Wan:
    """scripts/wan's namespaces for one link and N nodes; down on exit, whatever happened."""

    def __init__(self, args, nodes, rate, delay):
        self.args, self.nodes, self.rate, self.delay = args, nodes, rate, delay

    def __enter__(self):
        out = subprocess.run([os.path.join(ROOT, "scripts", "wan"), "up", str(self.nodes),
                              "--name", self.args.name, "--rate", self.rate, "--delay", self.delay,
                              "--port", str(self.args.port)],
                             check=True, capture_output=True, text=True).stdout
        self.listen, self.reach = [], []
        for line in out.strip().splitlines():
            _, listen, reach = line.split()
            self.listen.append(listen)
            self.reach.append(reach)
        return self

    def __exit__(self, *exc):
        subprocess.run([os.path.join(ROOT, "scripts", "wan"), "down", "--name", self.args.name],
                       check=False)

    def exec_prefix(self, i):
        return ["ip", "netns", "exec", "%s%d" % (self.args.name, i)]

    def listening(self, i):
        host, port = self.listen[i].split(":")
        return subprocess.run(self.exec_prefix(i) + [
            "bash", "-c", "exec 3<>/dev/tcp/%s/%s" % (host, port)],
            capture_output=True).returncode == 0


def stop(processes):
    for p in processes:
        if p.poll() is None:
            p.terminate()
    for p in processes:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


SINK = """
import socket, sys
host, port = sys.argv[1].rsplit(":", 1)
server = socket.create_server((host, int(port)))
while True:  # a connection that sends nothing is the readiness probe's
    connection, _ = server.accept()
    got = 0
    while True:
        chunk = connection.recv(1 << 20)
        if not chunk:
            break
        got += len(chunk)
    if got:
        connection.sendall(b"k")
        break
    connection.close()
"""
SOURCE = """
import socket, sys, time
host, port = sys.argv[1].rsplit(":", 1)
total = int(sys.argv[2])
block = b"\\0" * (1 << 20)
connection = socket.create_connection((host, int(port)))
started = time.time()
sent = 0
while sent < total:
    connection.sendall(block)
    sent += len(block)
connection.shutdown(socket.SHUT_WR)
connection.recv(1)
print(sent / (time.time() - started))
"""


def run_raw_tcp(args, wan, size):
    """Bytes/s of one plain TCP stream from node 0 to node 1 through the same path (node 0's
    link, node 1's reach address, node 1's link): what one ring hop can carry, no TLS, no
    framing. A ring member sends and receives one such stream at once, so its bus bandwidth is at
    most about this."""
    sink = subprocess.Popen(wan.exec_prefix(1) + ["/usr/bin/python3", "-c", SINK, wan.listen[1]],
                            stdout=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 10
        while not wan.listening(1):
            if time.time() > deadline:
                raise RuntimeError("raw TCP sink did not listen")
            time.sleep(0.1)
        out = subprocess.run(wan.exec_prefix(0) + ["/usr/bin/python3", "-c", SOURCE, wan.reach[1],
                                                   str(size)],
                             capture_output=True, text=True, timeout=60, check=True)
        return float(out.stdout.strip())
    finally:
        stop([sink])


def run_ours(args, wan, size):
    """Seconds per repetition of our ring among the namespaces (after its warm-up).

    `ravnest bench allreduce --hosts` makes namespaces of its own (bridged, no delay); to run in
    the ones Hivemind's peers use, this starts the daemons itself, one in each namespace
    listening on its address there, and asks them for one benchAllReduce
    (bench_anchor_ring) with the addresses the others reach them at: the links carry every byte.
    """
    work = tempfile.mkdtemp(prefix="rnh-ours-")
    secret = os.path.join(work, "secret")
    with open(secret, "w") as f:
        f.write(os.urandom(18).hex())
    os.chmod(secret, 0o600)
    daemons = []
    try:
        for i in range(wan.nodes):
            command = wan.exec_prefix(i) + [
                os.path.join(args.build, "apps", "ravnestd", "ravnestd"), "--node", "bench_%d" % i,
                "--listen", wan.listen[i], "--data-dir", os.path.join(work, "data_%d" % i),
                "--secret-file", secret, "--log-file", os.path.join(work, "daemon_%d.log" % i),
                # One host's cores, shared: as bench/wan's daemons, each takes its share only.
                "--threads", str(max(1, (os.cpu_count() or 1) // wan.nodes)),
                "--no-shared-memory"]
            if args.insecure:
                command.append("--insecure")
            daemons.append(subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                            stderr=subprocess.DEVNULL, start_new_session=True))
        deadline = time.time() + 30
        for i in range(wan.nodes):
            while not wan.listening(i):
                if daemons[i].poll() is not None or time.time() > deadline:
                    raise RuntimeError("ravnestd %d did not listen on %s (log: %s)" % (
                        i, wan.listen[i], os.path.join(work, "daemon_%d.log" % i)))
                time.sleep(0.2)
        command = [os.path.join(args.build, "apps", "bench", "bench_anchor_ring"),
                   "--peers", ",".join(wan.reach), "--bytes", str(size), "--reps", str(args.reps),
                   "--secret-file", secret] + (["--insecure"] if args.insecure else [])
        out = subprocess.run(command, capture_output=True, text=True, timeout=args.timeout)
        if out.returncode != 0:
            raise RuntimeError("bench_anchor_ring: " + out.stderr.strip())
        return json.loads(out.stdout.strip().splitlines()[-1])["seconds"]
    finally:
        stop(daemons)
        shutil.rmtree(work, ignore_errors=True)


def run_hivemind(args, wan, size):
    """(all-reduce seconds, matchmaking seconds) per timed round of Hivemind's averager."""
    folder = tempfile.mkdtemp(prefix="rnh-hivemind-")
    peers = []
    try:
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        for i in range(wan.nodes):
            command = wan.exec_prefix(i) + [
                args.python, os.path.join(ROOT, "bench", "anchors", "hivemind_allreduce.py"),
                "--rank", str(i), "--nodes", str(wan.nodes), "--bytes", str(size),
                "--reps", str(args.reps), "--listen", wan.listen[i], "--announce", wan.reach[i],
                "--rendezvous", folder, "--timeout", str(args.timeout)]
            log = open(os.path.join(folder, "log_%d" % i), "w")
            peers.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, env=env,
                                          start_new_session=True))
        deadline = time.time() + args.timeout
        for p in peers:
            try:
                p.wait(timeout=max(1, deadline - time.time()))
            except subprocess.TimeoutExpired:
                break
        results = []
        for i in range(wan.nodes):
            path = os.path.join(folder, "peer_%d.json" % i)
            if not os.path.exists(path):
                with open(os.path.join(folder, "log_%d" % i)) as f:
                    tail = f.read()[-600:]
                raise RuntimeError("hivemind peer %d wrote no result:\n%s" % (i, tail))
            with open(path) as f:
                results.append(json.load(f))
        errors = [r["error"] for r in results if "error" in r]
        if errors:
            raise RuntimeError("hivemind: " + "; ".join(errors))
        seconds, matchmaking = [], []
        for k, first in enumerate(results[0]["rounds"]):
            if first["warmup"]:
                continue
            rounds = [r["rounds"][k] for r in results]
            # The all-reduce starts when the last peer triggers it, and is over for the group when
            # the last peer has its average back.
            start = max(r["triggered"] for r in rounds)
            seconds.append(max(r["finished"] for r in rounds) - start)
            matchmaking.append(max(r["formed"] - r["called"] for r in rounds))
        return seconds, matchmaking, results[0]["hivemind"]
    finally:
        stop(peers)
        shutil.rmtree(folder, ignore_errors=True)


def main():
    # Terminated (hivemind.sh's Ctrl-C, a timeout): unwind, so that each run's finally stops its
    # processes and removes its folder before scripts/wan down.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", default="2,4")
    ap.add_argument("--sizes", default="4MiB,64MiB")
    ap.add_argument("--links", default="none/0ms,100mbit/20ms",
                    help="RATE/DELAY per scripts/wan: none/0ms is its bridge mode, unshaped (no "
                    "relay, no qdisc); a delay > 0 its relay mode")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--insecure", action="store_true", help="our daemons without TLS")
    ap.add_argument("--name", default="rnh", help="scripts/wan --name (namespace prefix)")
    ap.add_argument("--port", type=int, default=18500)
    ap.add_argument("--timeout", type=float, default=300)
    ap.add_argument("--python", required=True, help="the Hivemind venv's python")
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    args = ap.parse_args()
    try:
        links = [tuple(link.split("/")) for link in args.links.split(",")]
        if any(len(link) != 2 or not all(link) for link in links):
            raise ValueError
    except ValueError:
        ap.error("--links %s: give RATE/DELAY[,...] as scripts/wan takes them, e.g. "
                 "100mbit/20ms" % args.links)
    try:
        node_counts = [int(n) for n in args.nodes.split(",")]
        sizes = [(text, parse_size(text)) for text in args.sizes.split(",")]
    except ValueError as e:
        ap.error("--nodes/--sizes: %s" % e)
    if any(n < 2 for n in node_counts):
        ap.error("--nodes %s: an all-reduce needs at least 2 nodes" % args.nodes)
    if args.reps < 1:
        ap.error("--reps: at least 1")
    rows = []
    version = "?"
    print("%-3s %-8s %-14s %10s %12s %13s %7s %13s" % (
        "N", "size", "link", "tcp GB/s", "ours GB/s", "hivemind GB/s", "ratio", "hm matchmk s"),
        flush=True)
    for rate, delay in links:
        link = rate + "/" + delay
        for nodes in node_counts:
            with Wan(args, nodes, rate, delay) as wan:
                progress("N=%d %s: one TCP stream" % (nodes, link))
                raw = run_raw_tcp(args, wan, 16 << 20)
                for size_text, size in sizes:
                    progress("N=%d %s %s: ours" % (nodes, link, size_text))
                    ours = run_ours(args, wan, size)
                    progress("N=%d %s %s: hivemind" % (nodes, link, size_text))
                    try:
                        hm, matchmaking, version = run_hivemind(args, wan, size)
                    except RuntimeError as e:
                        # A failed or inexact round is a figure too: printed, and the run goes on.
                        print("%-3d %-8s %-14s %10.4f %12.4f  hivemind failed: %s" % (
                            nodes, size_text, link, raw / 1e9,
                            bus_bandwidth(nodes, size, statistics.median(ours)) / 1e9,
                            str(e).replace("\n", " ")[:300]), flush=True)
                        rows.append({"nodes": nodes, "size": size_text, "link": link,
                                     "ours_seconds": ours, "hivemind_error": str(e)})
                        continue
                    ours_bw = bus_bandwidth(nodes, size, statistics.median(ours))
                    hm_bw = bus_bandwidth(nodes, size, statistics.median(hm))
                    row = {"nodes": nodes, "size": size_text, "link": link, "raw_tcp": raw,
                           "ours_seconds": ours, "hivemind_seconds": hm,
                           "hivemind_matchmaking_seconds": matchmaking,
                           "ours_busbw": ours_bw, "hivemind_busbw": hm_bw}
                    rows.append(row)
                    print("%-3d %-8s %-14s %10.4f %12.4f %13.4f %6.2fx %13.2f" % (
                        nodes, size_text, link, raw / 1e9, ours_bw / 1e9, hm_bw / 1e9,
                        ours_bw / max(hm_bw, 1e-12), statistics.median(matchmaking)), flush=True)
    print("hivemind %s; ours %s; median of %d rounds after a warm-up; bus bandwidth = bytes x "
          "2(N-1)/N / seconds" % (version, "plain TCP (--insecure)" if args.insecure else "TLS",
                                   args.reps))
    print("json " + json.dumps(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
