@0xd734fd17fb897e3d;
# The whole wire of ravnest: what the requester (`ravnest`) says to the daemons (`ravnestd`) and
# what the daemons say to each other. Nothing travels that is not described here.
#
# Every connection runs over TLS whose certificates both ends derive from the plan's shared secret
# (or, with --insecure, plain TCP), and offers first nothing but a Gate: a peer gets the daemon's
# Node by proving, at the gate, that it knows the secret. Holding the Node is the permission: no
# method carries the secret, and the secret itself never travels (docs/security.md).

using Cxx = import "/capnp/c++.capnp";
$Cxx.namespace("ravnest::schema");

# ---------------------------------------------------------------------------------------------
# Values that cross a stage boundary: tensors and the few other TorchScript values a cut may carry.

struct Tensor {
  dtype @0 :Int8;            # c10::ScalarType code (Float = 6, Long = 4, ...)
  shape @1 :List(Int64);
  requiresGrad @2 :Bool;
  union {
    inline @3 :Data;         # the row-major contiguous bytes
    streamed @4 :UInt64;     # byte count; the bytes follow through the transfer's ByteSink,
                             # in the order the tensors appear in the message
  }
  codec @5 :UInt8;           # 0: the bytes are the tensor's. Else a floating-point tensor
                             # travels compressed (the job's [compression], docs/compression.md):
                             # 1 fp16, 2 bf16 (2 bytes a value), 3 int8 (1 byte a value, times
                             # `scales`); `dtype` and `shape` stay the original's
  scales @6 :Data;           # int8: float32, one per block of 256 values (the last one partial)
  memoryOrder @7 :List(UInt8);
    # Empty: the bytes are row-major. Else the tensor's dimensions from outermost to innermost in
    # memory (a permutation, e.g. [0, 2, 3, 1] for channels-last): the bytes are in that order and
    # the receiver allocates the tensor with the same layout, because kernels round differently
    # on another layout (a convolution on channels-last input against a contiguous copy differs
    # in the last bits), and a pipeline must compute what one process computes.
}

struct Value {
  union {
    tensor @0 :Tensor;
    none @1 :Void;
    uninitialized @2 :Void;  # TorchScript's placeholder for a value that is never read
    int @3 :Int64;
    float @4 :Float64;
    bool @5 :Bool;
    text @6 :Text;
    ints @7 :List(Int64);
    floats @8 :List(Float64);
    bools @9 :List(Bool);
  }
}

# Bytes with flow control: the sender keeps a bounded number of writes in flight.
interface ByteSink {
  write @0 (chunk :Data) -> stream;
  done @1 () -> ();          # all bytes written; fails if fewer or more arrived than announced
}

# ---------------------------------------------------------------------------------------------
# Daemon to daemon: one message per micro-batch and direction.

enum Phase {
  train @0;
  validate @1;
}

struct MicroBatch {
  jobId @0 :UInt64;
  phase @1 :Phase;
  step @2 :UInt64;           # batches since the job started (train), or validation round
  index @3 :UInt32;          # micro-batch within the batch
  count @4 :UInt32;          # micro-batches in this batch
  samples @5 :UInt32;        # samples in this micro-batch
  batchSamples @6 :UInt32;   # samples in the whole batch
  epoch @7 :UInt32;
  last @8 :Bool;             # the last batch of the phase (end of training or of validation)
  version @9 :UInt64;        # parameter server: the version of the weights a gradient was
                             # computed on, or of the weights sent
  batchCounted @10 :UInt64;  # labels of the whole batch the loss counts, when some are ignored
                             # ([loss] ignore_index); 0: the samples weigh the micro-batches
}

enum TransferKind {
  activations @0;            # producer -> consumer: the producer's outputs `index`
  gradients @1;              # consumer -> producer: d(loss)/d(output `index`) of the producer
  labels @2;                 # root -> leaf: the micro-batch's labels (index 0)
  randomState @3;            # random node -> the next one (NodeMetadata.random_nodes): the CPU
                             # generator's state (index 0, uint8) to start that micro-batch's
                             # training forward from; the last sends it to the first, tagged
                             # with the next micro-batch
  psGradients @4;            # worker -> server: the gradients of the server's shard after the
                             # worker's update `step` (value i: shard tensor i; on the last
                             # update also the shard's buffers); docs/parameter-server.md. In a
                             # hybrid plan: value 2t the ids, 2t+1 the summed row gradients of
                             # sparse table t, for the rows the update looked up
  psWeights @5;              # server -> worker (answering its update `step`) or evaluator: the
                             # shard's weights at `version` (value i: shard tensor i); in a
                             # hybrid plan, no values: the trainer's row gradients of update
                             # `step` are applied
  psLookup @6;               # hybrid: trainer -> server, its lookup number `step`: value t the
                             # sorted unique ids (int64) of sparse table t (NodeMetadata's
                             # parameter_server.sparse_tables) that the server holds
  psRows @7;                 # hybrid: server -> trainer answering lookup `step`: value t the rows
                             # of table t for those ids, in their order
  predicted @8;              # prediction job: leaf -> root, no values: the micro-batch's outputs
                             # are kept, another may enter (docs/predict.md)
}

struct IndexedValue {
  index @0 :UInt32;          # output index of the producing node (see node metadata)
  value @1 :Value;
}

struct Transfer {
  kind @0 :TransferKind;
  fromNode @1 :Int32;
  batch @2 :MicroBatch;
  values @3 :List(IndexedValue);
}

# ---------------------------------------------------------------------------------------------
# Status and progress, for `ravnest status` and the live progress of `ravnest train`.

enum NodeState {
  idle @0;                   # no job (a stage may be stored)
  ready @1;                  # job loaded, waiting for start
  training @2;
  finished @3;               # the job ended; trained stage saved
  failed @4;                 # the job failed; `error` says why
}

struct NodeStatus {
  node @0 :Text;             # "node_3"
  nodeId @1 :Int32;
  cluster @2 :Int32;
  role @3 :Text;
  state @4 :NodeState;
  hasStage @5 :Bool;
  stageSha256 @6 :Text;
  jobId @7 :UInt64;
  epoch @8 :UInt32;
  step @9 :UInt64;           # optimizer updates done
  batches @10 :UInt64;       # batches this node has finished (forward and backward)
  totalBatches @11 :UInt64;
  lastLoss @12 :Float64;     # leaf only: the loss of the last batch
  samplesPerSecond @13 :Float64;
  error @14 :Text;
  # Bytes and messages by kind since the job was loaded (libs/wire/wire_traffic.h).
  activationTraffic @15 :TrafficCount;
  gradientTraffic @16 :TrafficCount;
  ringTraffic @17 :TrafficCount;
  otherTraffic @18 :TrafficCount;   # labels, random state
  weightTraffic @19 :TrafficCount;  # parameter server -> workers, evaluator
  busySeconds @20 :Float64;         # computing (forward, backward, updates) since the job started
  runningSeconds @21 :Float64;      # since the job started, until its last batch finished
  residentBytes @22 :UInt64;        # the daemon's resident memory (RSS) now
  # The daemon's memory budget and use (libs/config/daemon/memory_budget.h, docs/daemon.md#memory).
  memoryLimitBytes @23 :UInt64;     # the budget: the smallest of memory_limit, the cgroup's
                                    # limit, MemTotal; 0 when none is known
  memoryLimitSource @24 :Text;      # which: "memory_limit", "cgroup memory.limit_in_bytes",
                                    # "cgroup memory.max" or "MemTotal"
  memoryBaselineBytes @25 :UInt64;  # the idle daemon's resident bytes, measured once it listened
  memoryUsedBytes @26 :UInt64;      # used now: the cgroup's usage less inactive file pages where
                                    # the budget is the cgroup's limit, else VmRSS
  memoryPeakBytes @27 :UInt64;      # the most used so far: the cgroup's max usage where the
                                    # budget is the cgroup's limit, else VmHWM
  stageProblem @28 :Text;           # why the stored stage cannot be used as it is, one line
                                    # naming the file (metadata.json unreadable, stage.pt not of
                                    # the size it was pushed with); empty when nothing is wrong
}

struct TrafficCount {
  bytesSent @0 :UInt64;
  bytesReceived @1 :UInt64;
  messagesSent @2 :UInt64;
  messagesReceived @3 :UInt64;
}

enum EventKind {
  step @0;                   # leaf: a batch finished; loss is its loss
  validation @1;             # leaf: a validation round finished; loss and accuracy
  finished @2;               # the node finished the job
  failed @3;                 # the node failed; message says why
  warning @4;                # the node goes on, but says something is wrong (memory near its
                             # budget); message says what, naming the node
  stopping @5;               # the node's daemon got SIGTERM while the job trains in a plan of
                             # several clusters, whose other roots it does not know: it asks the
                             # requester following the job to stop it on every node after the
                             # same update (hold, then stop: docs/faults.md#stopping), and waits
                             # for that stop at most 20 s before it exits anyway (the job then
                             # stops as after a failure). step: the node's updates so far;
                             # message names the node and why
}

struct ProgressEvent {
  kind @0 :EventKind;
  nodeId @1 :Int32;
  cluster @2 :Int32;
  epoch @3 :UInt32;
  step @4 :UInt64;
  loss @5 :Float64;
  accuracy @6 :Float64;      # validation only; NaN when the task has no classes
  samples @7 :UInt64;        # samples trained so far by this cluster
  message @8 :Text;
  lr @9 :Float64;            # step only: the learning rate the batch trained with; NaN when unknown
}

interface ProgressListener {
  event @0 (event :ProgressEvent) -> ();
}

# A ring's segments from its previous member; see Node.openRing.
interface RingSink {
  segment @0 (round :UInt64, step :UInt32, segment :UInt32, data :Data) -> ();
    # Returns once the receiving all-reduce has taken the segment's bytes out of the message: the
    # sender may then reuse the memory it was sent from. The sender keeps a few calls in flight
    # (libs/daemon/rings/ring_link.h), which bounds what waits on the receiver per ring.
  sharedSegment @1 (round :UInt64, step :UInt32, segment :UInt32, slot :UInt32, bytes :UInt64) -> ();
    # The same segment, its `bytes` in slot `slot` of the memory the sender shares (an openRing
    # whose offer was accepted); returns once the receiving all-reduce has read them, after which
    # the sender may write that slot again.
}

# Memory a ring's sender shares with its next member when both run on one host
# (libs/daemon/rings/shared_segments.h): a sealed memory file of `slots` slots of `slotBytes` after a
# page that starts with `nonce`, which the receiver opens as /proc/<pid>/fd/<fd>. A receiver on
# another host, or of another user, cannot open it or finds another nonce, and refuses.
struct SharedSegments {
  pid @0 :UInt32;
  fd @1 :UInt32;
  nonce @2 :Data;
  slots @3 :UInt32;
  slotBytes @4 :UInt64;
}

# A ring's segments over a TCP connection of their own (libs/wire/data_channel.h): the sender
# offers this in openRing, then connects to the receiver's daemon port and opens with a preface
# that carries `token`. `key` (32 bytes, AES-256-GCM) seals every record; it is empty only
# between daemons that both run --insecure.
struct DataChannelOffer {
  token @0 :Data;  # 32 random bytes, good for one connection
  key @1 :Data;
}

# ---------------------------------------------------------------------------------------------
# The files of a job: every file a reader opens for one of the job's paths forms a bundle, named
# by a SHA-256 over its files' relative names and contents and stored on the daemon under
# datasets/<bundle>/, laid out as on the requester. Two paths whose files share a name (say
# s1/d.csv and s2/d.csv) therefore never overwrite each other, and an MNIST images file travels
# with its labels file.

struct ShippedPath {
  field @0 :Text;            # the job file's key: "data.train", "data.validation", "loss.path"
  location @1 :Text;         # under datasets/: "<bundle>/<name>" for a file, "<bundle>" for a
                             # directory
}

# ---------------------------------------------------------------------------------------------

interface Node {
  # Requester -> daemon.
  pushStage @0 (metadataJson :Text, obsoleteStage :Data, sha256 :Text, size :UInt64)
      -> (sink :ByteSink);
    # A stage of `size` bytes and its metadata (docs/node-metadata.md). The stage streams through
    # `sink` in chunks (a stage of several GB never travels in one message, and the daemon holds
    # a chunk of it at a time); once `done` checked its size and checksum and the bytes load as a
    # TorchScript module, the stage and its metadata replace the stored ones, atomically: a push
    # that fails (refused, cut off, a wrong checksum, bytes that are no module) leaves the old
    # stage as it was and no temporary behind. Refused before any byte travels when the metadata
    # names another node, its stage_sha256 is not `sha256`, `size` is above limits.file_bytes,
    # a job is running, or the stage's measured peak (estimates.peak_memory_bytes) exceeds the
    # daemon's memory budget (docs/daemon.md#memory). `obsoleteStage` is where the stage travelled
    # whole before it streamed (at most 512 MiB): a push that sets it is refused.
  pushFile @1 (name :Text, size :UInt64, sha256 :Text) -> (sink :ByteSink);
    # A dataset file, streamed; stored under datasets/<name> once `done` checks size and
    # checksum. `name` is "<bundle>/<path>": the bundle is the 64 hex digits of ShippedPath, the
    # path one or more plain file names joined by "/" (no "..", nothing hidden).
  loadJob @2 (jobToml :Text, jobId :UInt64, identity :Text, resumeFrom :UInt64,
              shipped :List(ShippedPath), resumeIdentity :Text) -> ();
    # Checks the job against the stored stage (loss, optimizer, dataset, ...); state -> ready.
    # `identity` (lowercase hex, the requester's hash of the job text and the plan's stages)
    # names the job's checkpoints; `resumeFrom` > 0 continues from this node's checkpoint after
    # that many updates, 0 starts afresh (and drops the identity's old checkpoints).
    # `shipped` says where pushFile stored the files of each of the job's paths this node reads;
    # a path the node reads that is not listed is refused. `resumeIdentity`, when not empty, is
    # the identity whose checkpoint `resumeFrom` names (a job whose plan grew while it ran:
    # a cluster joined, docs/faults.md#providers-that-join); its checkpoints from then on are
    # `identity`'s. Empty: `identity`'s own.
  start @3 (jobId :UInt64) -> ();
  stop @4 (reason :Text, jobId :UInt64) -> ();
    # Abandons a running job; state -> idle. Idempotent. `reason` (why the requester stops it,
    # e.g. which node failed) is logged and ends any reduce in progress. With `jobId` other than
    # 0 only that job is stopped: a stop that arrives late never ends a newer job.
  status @5 () -> (status :NodeStatus);
  fetchStage @6 (sink :ByteSink) -> (obsoleteStage :Data, sha256 :Text, metadataJson :Text,
                                     size :UInt64);
    # The trained stage when the last job finished, else the stored one, streamed into the
    # requester's `sink` in chunks (then `done`); returns once it was, with the `size` and
    # SHA-256 of the bytes sent, for the requester to check. `obsoleteStage` stays empty (the
    # stage travelled there whole before it streamed).
  subscribe @7 (listener :ProgressListener) -> ();
    # Events of the current job go to `listener` until the job ends or the listener fails.
  fetchLosses @8 () -> (text :Text, validation :Text);
    # The leaf's losses.txt of the last job (one loss per batch), and its validation.txt (one
    # round per line: "updates epoch loss accuracy"). Empty on other nodes.

  # Daemon -> daemon.
  send @9 (transfer :Transfer) -> (sink :ByteSink);
    # Tensors marked `streamed` follow through `sink`; without any, `sink` is null.

  # Daemon -> daemon: all-reduce across clusters, over the rings of the node metadata. The
  # previous member of a ring opens one RingSink on this node and streams the ring's segments
  # into it; a sink of its own per ring, because a streaming call holds back every later call on
  # its object until the receiving all-reduce has taken the segment.
  openRing @10 (ring :UInt32, fromNode :Int32, shared :SharedSegments, channel :DataChannelOffer)
      -> (sink :RingSink, sharedAccepted :Bool, channelAccepted :Bool);
    # With `shared`, the sender offers its memory; `sharedAccepted` says whether the sink takes
    # sharedSegment calls (else only segment). With `channel` (and shared memory not accepted),
    # the sender offers a data channel; `channelAccepted` says the receiver now expects its
    # connection, over which the ring's segments then come instead of segment calls.
  abortReduce @11 (ring :UInt32, reason :Text, epoch :UInt64) -> ();
    # A member of the ring failed: every blocked reduce on this ring fails with `reason`, of
    # membership `epoch` or an older one (setRings); a reduce of a newer membership goes on.
  benchAllReduce @12 (peers :List(Text), position :UInt32, bytes :UInt64,
                      repetitions :UInt32, codec :Text) -> (seconds :List(Float64));
    # `ravnest bench allreduce`: all-reduce `bytes` of float32 over an ad-hoc ring of daemons
    # (`peers` in ring order, this daemon at `position`), `repetitions` times after a warm-up,
    # each from a barrier (a small all-reduce over the same ring); `seconds`: this daemon's time
    # for each repetition, from the barrier's end to its own end.
    # `codec`: "" or "none", else the [compression] rings codec its segments travel under
    # ("fp16", "bf16", "int8"; docs/compression.md).

  # Checkpoints (docs/faults.md). A checkpoint belongs to a job `identity` and to a slot of the
  # plan (`cluster`, `position`), not to a node: a spare that takes a dead node's slot resumes
  # from it. Each node also keeps copies of the checkpoints of the nodes it is the keeper of
  # (libs/config/plan/checkpoint_keeper.h), so that they outlive a node that dies with its disk.
  checkpoints @13 (identity :Text, cluster :Int32 = -1, position :Int32 = -1, verify :Bool)
      -> (updates :List(UInt64), finished :Bool);
    # The updates after which this node holds a complete checkpoint of the job `identity`,
    # ascending: its own (slot -1, -1, or its own slot), or the copies it keeps for that slot.
    # With `verify`, only those a resume may load: whose bytes still hash to the checksum they
    # were written with, and which say they are the checkpoint of job `identity` after that
    # update of that slot (one copied from another node or job, or renamed, is left out).
    # `finished`: this node's last run of the job `identity` trained to its end (forgotten when
    # a stage is pushed).
  storeCheckpoint @14 (identity :Text, cluster :Int32, position :Int32,
                       updates :UInt64, size :UInt64, sha256 :Text) -> (sink :ByteSink);
    # A checkpoint file, streamed; kept once `done` checks size and checksum. Of this node's own
    # slot (the requester, after `ravnest replace`), it becomes this node's own checkpoint; of
    # another slot (a peer, after writing one), a copy kept for that slot (the newest 3).
  fetchCheckpoint @15 (identity :Text, cluster :Int32, position :Int32,
                       updates :UInt64, sink :ByteSink)
      -> (obsoleteCheckpoint :Data, sha256 :Text, size :UInt64);
    # The checkpoint file of that slot after `updates` updates, this node's own or a kept copy,
    # streamed into `sink` as fetchStage streams a stage; `obsoleteCheckpoint` stays empty.
  fetchPredictions @16 (sink :ByteSink) -> (obsoletePredictions :Data, sha256 :Text,
                                           size :UInt64);
    # The leaf's predictions.pt of the last prediction job (docs/predict.md): the model's outputs
    # for every sample in order, as torch.save writes them, streamed into `sink` as fetchStage
    # streams a stage; `obsoletePredictions` stays empty. Refused on other nodes and before
    # a prediction job finished.
  hold @17 (jobId :UInt64, target :UInt64) -> (updates :UInt64, holds :Bool);
    # A stop that every node agrees on (docs/faults.md#stopping): a cluster's root lets no batch
    # of job `jobId` in beyond an update boundary, so that every node of the cluster reaches the
    # same update and its stop-time checkpoint is of that update. `target` 0: the nearest boundary
    # (the end of the update whose batches are already in); else `target` updates, or the nearest
    # boundary if that is further. `updates`: the boundary it now holds at (the job's last update
    # when it ends before); `holds` false on a node that feeds no data or runs no such job. A
    # hold that no stop follows within 300 s (the requester died) ends in the root stopping the
    # job on every node of its cluster there.
  setRings @18 (jobId :UInt64, epoch :UInt64, views :List(RingView)) -> ();
    # Requester -> daemon, for a job of several clusters that the requester follows and whose
    # failed clusters it drops (docs/faults.md#providers-that-come-and-go). Epoch 0 (no views):
    # the requester coordinates this job's membership, so a failed cross-cluster reduce waits
    # (bounded) for a new one instead of failing the job, and members of other clusters are not
    # watched by PeerWatch. Epoch > 0: this node's rings from now on (`views` replace the node
    # file's memberships, by ring id); an interrupted reduce is run again over them. Refused for
    # another job, or an epoch not above the current one (a late message).
  ringRounds @19 (jobId :UInt64) -> (rings :List(RingRound));
    # Requester -> daemon, before a setRings of a new epoch: how many rounds of each of its
    # cross-cluster rings this node has completed in job `jobId` (docs/faults.md#providers-that-
    # come-and-go), so that the requester names the round every survivor runs from
    # (RingView.runFrom). Refused for another job.
  pushMetadata @20 (metadataJson :Text) -> ();
    # New metadata for the stage this node stores, whose bytes do not travel again (a plan
    # rewritten around the node: `ravnest replace` or `ravnest join` changed its ring neighbours
    # or the clusters' count). Refused, changing nothing, when no stage is stored or the stored
    # one has a problem (status's stageProblem), when the metadata names another node or another
    # stage (its stage_sha256 is not the stored stage's: push the stage), when a job is loaded
    # or running, or when the stage's measured peak no longer fits the daemon's memory budget.
    # The stage and the last job's result stay; the stage's checksum is checked when a job
    # loads it, as after pushStage.
}

# How many rounds of one ring a node completed (ringRounds): `completed` is also the next round
# it runs.
struct RingRound {
  ring @0 :UInt32;
  completed @1 :UInt64;
}

# A node's view of one of its rings (node-metadata.md#rings), as setRings sends it.
struct RingView {
  ring @0 :UInt32;
  size @1 :UInt32;
  position @2 :UInt32;
  nextNode @3 :Int32;
  nextCluster @4 :Int32;
  nextAddress @5 :Text;
  prevNode @6 :Int32;
  prevCluster @7 :Int32;
  prevAddress @8 :Text;
  runFrom @9 :UInt64;
  runFromKnown @10 :Bool;
    # The round this ring runs from over the new membership: the fewest any of its members
    # completed (ringRounds). A member that completed that round already runs it again from the
    # inputs it kept, and keeps its own result. Not known (an older requester, or a member that
    # did not answer): each member runs the round it is at.
}

# ---------------------------------------------------------------------------------------------
# The bootstrap interface of every daemon: a connection may do nothing else until it proved the
# secret. Before that, the daemon reads at most a few KiB from it, in messages of at most 4 KiB,
# and closes it after 10 s (libs/wire/guarded_stream.h).

interface Gate {
  challenge @0 () -> (nonce :Data);
    # 32 fresh random bytes, good for one open() on this connection.
  open @1 (proof :Data, clientNonce :Data) -> (node :Node, serverProof :Data);
    # `proof` = HMAC-SHA-256(gate key, "ravnest gate client proof v1" || nonce || clientNonce),
    # `clientNonce` 32 fresh random bytes of the client's; the gate key is derived from the
    # secret (libs/wire/node_credentials.h). A wrong proof, or an open without a challenge not yet
    # used, fails with "refused: wrong secret" and is logged with the peer's address.
    # `serverProof` is the same HMAC under "ravnest gate server proof v1": the client checks that
    # the daemon knows the secret too before it sends anything.
}
