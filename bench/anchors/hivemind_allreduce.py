"""One Hivemind peer of bench/anchors/hivemind.sh: runs inside one scripts/wan namespace, averages
one float32 tensor with its groupmates through hivemind.averaging.DecentralizedAverager (what
hivemind.Optimizer averages with), and writes its timings to <rendezvous>/peer_<rank>.json.

Run by bench/anchors/hivemind.sh in ~/.cache/ravnest/venv-hivemind, one process a namespace:
  python hivemind_allreduce.py --rank I --nodes N --bytes B --reps R \
      --listen 10.213.I.2:PORT --announce 10.213.I.1:PORT --rendezvous DIR

Peer 0 starts the DHT; the others bootstrap from its multiaddr (on its namespace's reach address,
through the link), read from DIR/maddr. The peers meet through files in DIR (they share this
machine's file system and clock), which keeps the timed part to the all-reduce itself:

  each round: every peer sets its tensor to (rank + 1) * pattern, calls
  step(require_trigger=True, wait=False) (Hivemind's matchmaking: a group through the DHT, as
  hivemind.Optimizer pre-schedules it), waits until its group is formed (AWAITING_TRIGGER), then
  waits for every peer to have reached that point, and triggers the all-reduce
  (allow_allreduce, as the Optimizer does when its batch is done). Written per round: the time of
  the trigger, the time the averaged tensor was back, and the time step() was called (so the
  matchmaking is reported too, apart).

The result is checked against the exact mean, pattern * (N + 1) / 2, every round; a peer whose
round failed or whose result is off writes "error" and exits non-zero.
"""
import argparse
import json
import os
import sys
import time


def wait_for(path, timeout, what):
    deadline = time.time() + timeout
    failed = os.path.join(os.path.dirname(path), "failed")
    while not os.path.exists(path):
        if os.path.exists(failed):  # another peer's round failed: this run is over
            with open(failed) as f:
                raise RuntimeError("stopped: " + f.read())
        if time.time() > deadline:
            raise TimeoutError("%s: %s did not appear in %.0f s" % (what, path, timeout))
        time.sleep(0.005)


def write_atomic(path, text):
    with open(path + ".tmp", "w") as out:
        out.write(text)
    os.replace(path + ".tmp", path)


def maddr(address):
    host, port = address.rsplit(":", 1)
    return "/ip4/%s/tcp/%s" % (host, port)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rank", type=int, required=True)
    ap.add_argument("--nodes", type=int, required=True)
    ap.add_argument("--bytes", type=int, required=True)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--listen", required=True, help="host:port this peer's libp2p listens on")
    ap.add_argument("--announce", required=True, help="host:port the others reach it at")
    ap.add_argument("--rendezvous", required=True)
    ap.add_argument("--matchmaking", type=float, default=2.0,
                    help="min_matchmaking_time (Hivemind's default: 5 s)")
    ap.add_argument("--timeout", type=float, default=300.0)
    args = ap.parse_args()

    import torch
    import hivemind
    from hivemind.averaging import DecentralizedAverager
    from hivemind.averaging.control import AveragingStage

    rank, nodes, folder = args.rank, args.nodes, args.rendezvous
    result = {"rank": rank, "hivemind": hivemind.__version__, "rounds": []}
    try:
        common = dict(host_maddrs=[maddr(args.listen)], announce_maddrs=[maddr(args.announce)],
                      start=True)
        if rank == 0:
            dht = hivemind.DHT(**common)
            # The announced address (the link's far end) with this peer's id: what the others dial.
            announced = maddr(args.announce) + "/"
            ours = [str(m) for m in dht.get_visible_maddrs() if str(m).startswith(announced)]
            write_atomic(os.path.join(folder, "maddr"), ours[0])
        else:
            wait_for(os.path.join(folder, "maddr"), 60, "peer 0's multiaddr")
            with open(os.path.join(folder, "maddr")) as f:
                dht = hivemind.DHT(initial_peers=[f.read().strip()], **common)

        elements = args.bytes // 4
        pattern = torch.rand(elements, generator=torch.Generator().manual_seed(0))
        mine = pattern * float(rank + 1)
        expected = pattern * ((nodes + 1) / 2.0)
        averager = DecentralizedAverager(
            [mine.clone()], dht, start=True, prefix="rnh_bench", target_group_size=nodes,
            min_group_size=nodes, min_matchmaking_time=args.matchmaking,
            request_timeout=10.0, allreduce_timeout=args.timeout, next_chunk_timeout=60.0)
        write_atomic(os.path.join(folder, "ready_%d" % rank), "1")
        for other in range(nodes):
            wait_for(os.path.join(folder, "ready_%d" % other), 120, "peer %d ready" % other)

        for k in range(args.warmup + args.reps):
            with averager.get_tensors() as tensors:
                tensors[0].copy_(mine)
            # Every peer enters matchmaking after the previous round is over everywhere.
            if k > 0:
                for other in range(nodes):
                    wait_for(os.path.join(folder, "done_%d_%d" % (k - 1, other)), args.timeout,
                             "peer %d round %d" % (other, k - 1))
            called = time.time()
            control = averager.step(require_trigger=True, wait=False, timeout=args.timeout)
            while control.stage in (AveragingStage.IDLE, AveragingStage.LOOKING_FOR_GROUP):
                if control.done():
                    break
                time.sleep(0.002)
            formed = time.time()
            write_atomic(os.path.join(folder, "formed_%d_%d" % (k, rank)), "1")
            for other in range(nodes):
                wait_for(os.path.join(folder, "formed_%d_%d" % (k, other)), args.timeout,
                         "peer %d's group, round %d" % (other, k))
            triggered = time.time()
            control.allow_allreduce()
            group = control.result(timeout=args.timeout)
            finished = time.time()
            if group is None or len(group) != nodes:
                raise RuntimeError("round %d: the averager returned %s (group of %d wanted)" %
                                   (k, "no group" if group is None else "%d peers" % len(group),
                                    nodes))
            with averager.get_tensors() as tensors:
                error = (tensors[0] - expected).abs().max().item()
            if error > 1e-5 * (nodes + 1):
                raise RuntimeError("round %d: result is not the mean (max abs error %g)" %
                                   (k, error))
            result["rounds"].append({"called": called, "formed": formed, "triggered": triggered,
                                     "finished": finished, "max_abs_error": error,
                                     "warmup": k < args.warmup})
            write_atomic(os.path.join(folder, "done_%d_%d" % (k, rank)), "1")
        # Stay up until every peer is done: a peer that leaves early can fail another's round.
        for other in range(nodes):
            wait_for(os.path.join(folder, "done_%d_%d" % (args.warmup + args.reps - 1, other)),
                     args.timeout, "peer %d's last round" % other)
        write_atomic(os.path.join(folder, "peer_%d.json" % rank), json.dumps(result))
        averager.shutdown()
        dht.shutdown()
        return 0
    except Exception as e:  # written down for the script, which prints it
        result["error"] = "%s: %s" % (type(e).__name__, e)
        if not os.path.exists(os.path.join(folder, "failed")):
            write_atomic(os.path.join(folder, "failed"), "peer %d: %s" % (rank, result["error"]))
        write_atomic(os.path.join(folder, "peer_%d.json" % rank), json.dumps(result))
        print("hivemind_allreduce peer %d: %s" % (rank, result["error"]), file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
