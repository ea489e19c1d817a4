// Bandwidth-optimal ring all-reduce (the algorithm of Gloo's and NCCL's ring), written against
// RingTransport only: no sockets here.
//
// One run(round, tensors):
//  - groups the tensors by dtype (in order of first appearance) and flattens each group into one
//    contiguous buffer (a group of one contiguous tensor is reduced in place, without a copy);
//  - splits each buffer into `size` chunks (sizes differ by at most one element; chunks may be
//    empty when the buffer has fewer elements than members);
//  - reduce-scatter, size-1 steps: at step s member p sends chunk (p-s) and receives chunk
//    (p-s-1), adding it into its own; afterwards member p holds the whole sum of chunk (p+1),
//    which it divides by `size` when averaging;
//  - all-gather, size-1 steps: at step s member p sends chunk (p+1-s) and receives chunk (p-s),
//    overwriting its own.
//  Each member sends (and receives) 2(N-1)/N of the buffer's bytes.
//  - Every chunk travels in segments of `segment_bytes`; a segment is forwarded as soon as it has
//    been received and added, by a sender thread owned by this object, so the sending of one
//    segment overlaps the receiving and adding of the next. Flow control is the transport's.
//  - Each chunk's sum is computed once, by one member, in a fixed order, then copied to all:
//    every member ends with bitwise identical tensors.
//
// Message tags: round = the caller's round; step = group * 2(N-1) + s, where s counts the
// reduce-scatter steps 0..N-2 then the all-gather steps N-1..2N-3; segment = the segment's index
// within the chunk sent at that step. Every member must call run() with the same round and
// tensors of the same dtypes, shapes and order; a member whose sizes differ makes the transport
// fail (a message of the wrong size).
//
// Dtypes: float32, float64, float16, bfloat16, int8, int16, int32, int64, uint8. Averaging
// divides the sum by `size`: floating types with one correctly rounded division; integer types
// (e.g. BatchNorm's num_batches_tracked) with floor division of the exact sum (Python's `//`,
// torch.div(rounding_mode="floor")), so integer members stay integers and agree everywhere.
// Integer sums wrap around on overflow. bool and complex tensors are refused
// (std::invalid_argument), as are tensors not on the CPU or not strided.
//
// On failure run() throws (RingError from the transport); the tensors' contents are then
// unspecified (partly reduced). The sender thread is drained before run() returns or throws.
//
// Compression (RingCompression, a job's `[compression] rings`): the float32 and float64 groups
// travel under a lossy codec (segment_codec.h), the others as they are. Each member encodes each
// element once per run: the partial sums it forwards in the reduce-scatter, and the final chunk it
// owns, once, for the all-gather (which forwards the received bytes without re-encoding them, and
// the owner keeps what it sent): every member still ends with bitwise identical tensors. Each
// encoding goes through an error-feedback residual kept per stream (the caller's name for a set
// of tensors, e.g. "gradients") and segment across runs, so the error of the average over k runs
// shrinks as 1/k. Memory: one float32 residual per compressed element, and the encoded segments
// of one run.
#pragma once

#include <ATen/ATen.h>

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "libs/ring/ring_transport.h"
#include "libs/wire/error_feedback.h"
#include "libs/wire/tensor_codec.h"

namespace ravnest::ring {

struct RingCompression {
  wire::TensorCodec codec = wire::TensorCodec::kNone;
  std::string stream;  // which residuals: the same tensors, in the same order, every run
};

struct RingAllReduceOptions {
  size_t segment_bytes = 1 << 20;  // bytes per message (rounded down to whole elements, >= 1)
  // When nonzero, a chunk travels in at least two segments (so that one is added while the next
  // one travels) unless that would make them smaller than this: segments of
  // clamp(chunk / 2, min_segment_bytes, segment_bytes). Every member computes the same sizes.
  size_t min_segment_bytes = 0;
  bool average = true;             // divide the sum by the ring's size
};

class RingAllReduce {
 public:
  using Options = RingAllReduceOptions;

  // `transport` must outlive this object. position in [0, size).
  RingAllReduce(RingTransport& transport, int position, int size, Options options = {});
  ~RingAllReduce();
  RingAllReduce(const RingAllReduce&) = delete;
  RingAllReduce& operator=(const RingAllReduce&) = delete;

  // Sums (then averages, if asked) `tensors` in place across the ring. size == 1: no-op (no
  // division either). Not thread-safe: one run at a time per object.
  void run(uint64_t round, std::vector<at::Tensor>& tensors);
  // The same, averaging or not whatever the options say: one object serves a ring's every
  // reduce (a daemon averages parameters but sums shared gradients over the same links).
  void run(uint64_t round, std::vector<at::Tensor>& tensors, bool average,
           const RingCompression& compression = {});
  // Forgets the error-feedback residuals (all streams).
  void clear_residuals() { feedback_.clear(); }

  int position() const { return position_; }
  int size() const { return size_; }
  const Options& options() const { return options_; }

 private:
  // What the sender thread calls: send(), send_relayable(), or relay() of `received`.
  enum class SendKind { kSend, kRelayable, kRelay };
  struct SendJob {
    RingTag tag;
    const void* data;
    size_t bytes;
    SendKind kind = SendKind::kSend;
    RingTag received;  // kRelay
  };

  void reduce_buffer(uint64_t round, uint32_t group, at::ScalarType dtype, uint8_t* base,
                     size_t count, bool average);
  // The same, the segments encoded with `feedback`'s codec; `key` names the group's residuals.
  void reduce_buffer_compressed(uint64_t round, uint32_t group, at::ScalarType dtype,
                                uint8_t* base, size_t count, bool average,
                                wire::ErrorFeedback& feedback, const std::string& key);
  void enqueue_send(const RingTag& tag, const void* data, size_t bytes,
                    SendKind kind = SendKind::kSend, const RingTag& received = {});
  void rethrow_send_error();
  // How the reduce-scatter sends at its `last` step, which starts the all-gather: relayable when
  // members after the next pass the segment on unchanged (N > 2).
  SendKind scatter_send(bool last) const {
    return last && size_ > 2 ? SendKind::kRelayable : SendKind::kSend;
  }
  // Receives an all-gather segment into `data`; with `pass_on`, as one to relay, and queues its
  // relay to the next member as `next`.
  void gather_segment(const RingTag& tag, const RingTag& next, void* data, size_t bytes,
                      bool pass_on);
  // Waits until every queued send has been handed to the transport. With `cancel`, drops the
  // ones not started yet first (error path).
  void drain_sends(bool cancel);
  void sender_loop();

  RingTransport& transport_;
  const int position_;
  const int size_;
  const Options options_;

  std::vector<uint8_t> scratch_;      // one received compressed segment
  // Compressed runs: the encoded segments sent (kept until the transport is flushed), and the
  // residuals by stream.
  std::deque<std::vector<uint8_t>> encoded_;
  size_t encoded_used_ = 0;  // of encoded_ in this run; the rest are kept from earlier runs
  // The next buffer of encoded_ for this run, `bytes` long (a deque: the earlier ones stay where
  // the sender reads them).
  std::vector<uint8_t>& next_encoded(size_t bytes);
  std::map<std::string, wire::ErrorFeedback> feedback_;
  std::vector<at::Tensor> flat_cache_;  // flattening buffers, reused across runs

  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<SendJob> queue_;
  bool sending_ = false;  // the sender thread is inside transport_.send()
  bool stop_ = false;
  std::exception_ptr send_error_;
  std::thread sender_;
};

}  // namespace ravnest::ring
