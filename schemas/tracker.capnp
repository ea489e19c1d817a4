@0xa54faa1015b3c6e1;
# The tracker's wire (docs/tracker.md): what daemons (`ravnestd --tracker`) and requesters
# (`ravnest pool --tracker`, `status --tracker`, `clusterize --tracker`) say to a tracker
# (`ravnest tracker`). Apart from ravnest.capnp so that a change here recompiles only the tracker's
# code. The connection is the daemons' own: TLS from the shared secret, then a gate whose proofs
# are the daemons' gate's (schemas/ravnest.capnp, interface Gate; libs/wire/gate.h), which gives
# a Tracker instead of a Node.

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("ravnest::schema");

# What a daemon measured of its host when it registered (libs/daemon/tracker/hardware_probe.h).
struct Hardware {
  memoryBytes @0 :UInt64;        # memory the daemon may use: the smallest of its memory_limit,
                                 # its cgroup's limit and MemAvailable
  memorySource @1 :Text;         # which of those it is ("memory_limit", "cgroup memory.max", ...)
  declaredMemoryBytes @2 :UInt64;  # its memory_limit (0: none); above memoryBytes, it is ignored
  gpuMemoryBytes @3 :List(UInt64); # the total memory of each CUDA device it computes on (today
                                 # its one compute device); empty on a CPU daemon
  gflops @4 :Float64;            # float32 matrix products per second on its compute device, GFLOP/s
  bandwidthMbps @5 :Float64;     # upload to the tracker, timed (probe), Mbit/s
}

struct Registration {
  name @0 :Text;                 # the daemon's node name, "node_<id>"
  addresses @1 :List(Text);      # host:port it can be reached at, the first preferred
  hardware @2 :Hardware;
  relayOffered @3 :Text;         # host:port where it relays for daemons behind NAT (its
                                 # --offer-relay); empty: it offers none
}

struct Member {
  registration @0 :Registration;
  fromHost @1 :Text;             # the host the registration came from, as the tracker saw it
  secondsSinceHeartbeat @2 :Float64;
  registeredAtUnix @3 :Float64;  # wall clock, seconds since 1970
}

interface Tracker {
  register @0 (registration :Registration)
      -> (epoch :UInt64, heartbeatSeconds :Float64, expirySeconds :Float64);
    # Joins the pool, or updates the daemon's entry (same name, same first address; another first
    # address only over the connection whose registration of the name was accepted last: the
    # daemon moved to another relay). Refused in one line: a name registered live from another
    # address, more registrations from one host than the tracker takes, a full pool, or too many
    # calls from one connection.
  heartbeat @1 (name :Text) -> (known :Bool, epoch :UInt64);
    # `known` false: the tracker holds no live entry of `name` (it expired): register again.
  pool @2 () -> (epoch :UInt64, members :List(Member), expirySeconds :Float64);
    # The live pool, sorted by name.
  probe @3 (payload :Data) -> ();
    # Bytes to time an upload with (at most 16 MiB a call); nothing is kept.
  leave @4 (name :Text) -> (left :Bool);
    # A daemon stopping: `name` leaves the pool now rather than at its expiry. Only from the host it
    # registered from; `left` false when it was no member (or registered from elsewhere).
  dialBack @5 (port :UInt16) -> (reached :Bool, why :Text, relays :List(Text));
    # At most 4 under way towards one host (more are refused in one line); port 0 is refused.
    # Whether a daemon can be reached (AutoNAT's question): the tracker opens a TCP connection to
    # `port` on the host the call came from, as it sees it, within 3 s (`why`: what failed), and
    # closes it. Only the caller's own host is dialled. `relays`: where the caller may hold a port
    # instead, the tracker's own relay first (":PORT" when it relays on every interface: on the
    # host the caller dials the tracker at), then the live members' relayOffered.
}

interface TrackerGate {
  challenge @0 () -> (nonce :Data);
  open @1 (proof :Data, clientNonce :Data) -> (tracker :Tracker, serverProof :Data);
    # As Gate.open, with the same proofs.
}
