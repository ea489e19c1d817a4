#include "libs/daemon/rings/bench_service.h"

#include <chrono>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include <ATen/ATen.h>

#include "libs/config/job/compression_spec.h"
#include "libs/daemon/rings/bench_request.h"
#include "libs/daemon/rings/ring_link.h"
#include "libs/daemon/rings/ring_member.h"
#include "libs/ring/ring_allreduce.h"

namespace ravnest::daemon {

namespace {

const uint32_t kBenchRing = 0xffffffffu;  // apart from the rings of any plan

}  // namespace

kj::Promise<void> BenchService::bench_all_reduce(BenchAllReduceCall context) {
  auto params = context.getParams();
  const uint32_t position = params.getPosition();
  const uint64_t bytes = params.getBytes();
  const uint32_t repetitions = params.getRepetitions();
  checked([&] { check_bench_request(params.getPeers().size(), position, bytes, repetitions); });
  config::WireCodec codec = config::WireCodec::kNone;
  const std::string codec_name = params.getCodec();
  checked([&] {
    if (!codec_name.empty() && !config::parse_wire_codec(codec_name, codec)) {
      throw std::invalid_argument("benchAllReduce: codec '" + codec_name +
                                  "': use none, fp16, bf16 or int8");
    }
  });
  std::vector<std::string> peers;
  for (auto p : params.getPeers()) peers.push_back(p);
  auto seconds = std::make_shared<std::vector<double>>();
  // The mailbox is reset when the benchmark ends, not when its call arrives: the members'
  // calls arrive at once, and a peer that started first may already have left its first segment
  // here, which a reset now would drop (the ring then waits for it for ever).
  return threads_.run([this, peers, position, bytes, repetitions, seconds, codec]() {
           const size_t n = peers.size();
           RingLink link(rpc_, links_, traffic_, mailbox_, kBenchRing, -1,
                         {"peer " + std::to_string((position + 1) % n), peers[(position + 1) % n]},
                         {"peer " + std::to_string((position + n - 1) % n),
                          peers[(position + n - 1) % n]},
                         daemon_ring_in_flight(), daemon_ring_shared_slot_bytes(shared_memory_),
                         daemon_ring_channels(insecure_));
           ring::RingAllReduce reduce(link, static_cast<int>(position), static_cast<int>(n),
                                daemon_ring_options());
           std::vector<at::Tensor> tensors = {
               at::full({static_cast<int64_t>(bytes / 4)}, float(position + 1))};
           // One element a member: every chunk holds one, so no member ends this all-reduce
           // before every member started it.
           std::vector<at::Tensor> barrier = {at::zeros({static_cast<int64_t>(n)})};
           for (uint32_t r = 0; r <= repetitions; ++r) {
             // Each repetition starts from a barrier, as Gloo's in the same benchmark does
             // (c10d's barrier before each): without it, a member that ended the previous
             // repetition first counted, in this one, the wait for the others to start.
             reduce.run(2 * uint64_t{r}, barrier, true);
             const auto start = std::chrono::steady_clock::now();
             // A job's rings go the same way: the codec with its error feedback (ring_member).
             reduce.run(2 * uint64_t{r} + 1, tensors, true, {codec, "bench"});
             const double s =
                 std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
             if (r > 0) seconds->push_back(s);  // the first is a warm-up
           }
           // Member p starts from p + 1 everywhere: the average is (n + 1) / 2, exactly, after
           // every run. A figure from a wrong sum would be worthless.
           // Under a codec, as close as the codec is (int8: 1/127 of a block's largest value).
           const float expected = static_cast<float>(n + 1) / 2.0f;
           const bool right =
               codec == config::WireCodec::kNone
                   ? tensors[0].eq(expected).all().item<bool>()
                   : tensors[0].sub(expected).abs().max().item<float>() <= 0.02f * n;
           if (!right) {
             throw std::runtime_error("the benchmark's all-reduce computed a wrong average");
           }
         })
      .then([context, seconds]() mutable {
        auto out = context.getResults().initSeconds(seconds->size());
        for (size_t i = 0; i < seconds->size(); ++i) out.set(i, (*seconds)[i]);
      })
      // Done or failed: the next benchmark starts without this one's aborts or stale segments.
      .attach(kj::defer([this]() { mailbox_.reset(); }));
}

kj::Promise<void> BenchService::finish() {
  mailbox_.abort(kBenchRing, "the daemon is stopping");
  return threads_.idle();
}

}  // namespace ravnest::daemon
