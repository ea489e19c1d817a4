#include "libs/training/memory_probe.h"

#include <algorithm>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <stdexcept>
#include <unistd.h>

#include <ATen/Functions.h>
#include <torch/csrc/autograd/autograd.h>
#include <torch/csrc/autograd/grad_mode.h>

#include "libs/base/process_memory.h"
#include "libs/stage/stage_file.h"
#include "libs/torch_support/torch_errors.h"
#include "libs/training/checkpoint.h"
#include "libs/training/device_memory.h"
#include "libs/training/optimizer.h"
#include "libs/training/random_state.h"

namespace ravnest::training {

namespace {

// Every tensor of a (possibly nested) value, in order.
void collect_tensors(const c10::IValue& value, std::vector<at::Tensor>* out) {
  if (value.isTensor()) {
    out->push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& element : value.toTupleRef().elements()) collect_tensors(element, out);
  } else if (value.isList()) {
    for (const auto& element : value.toListRef()) collect_tensors(element, out);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) collect_tensors(entry.value(), out);
  }
}

int64_t tensor_bytes(const c10::IValue& value) {
  std::vector<at::Tensor> tensors;
  collect_tensors(value, &tensors);
  int64_t bytes = 0;
  for (const auto& t : tensors) {
    if (t.defined()) bytes += static_cast<int64_t>(t.numel() * t.element_size());
  }
  return bytes;
}

// One micro-batch between its forward and its backward.
struct Flight {
  std::vector<c10::IValue> received;  // the stage's inputs, as a daemon decodes them
  c10::IValue output;
};

class Phase {
 public:
  Phase(std::string name, MemoryProbeResult* result, const c10::Device& device)
      : name_(std::move(name)), result_(result), device_(device) {
    if (device_memory_measurable(device_)) reset_device_peak(device_);
    base::reset_peak_resident();
  }
  ~Phase() {
    MemoryProbePhase phase{name_, base::read_process_memory().peak_resident_bytes, 0};
    if (device_memory_measurable(device_)) {
      // A destructor must not throw (it may run for a failure): a card that cannot be read
      // after it was read at the start leaves this phase's device peak at 0.
      try {
        phase.device_peak_bytes = read_device_memory(device_).reserved_peak_bytes;
      } catch (const std::exception&) {
      }
      result_->device_peak_bytes = std::max(
          result_->device_peak_bytes, result_->device_baseline_bytes + phase.device_peak_bytes);
    }
    result_->phases.push_back(phase);
    result_->peak_bytes = std::max(result_->peak_bytes, phase.peak_bytes);
  }

 private:
  std::string name_;
  MemoryProbeResult* result_;
  c10::Device device_;
};

}  // namespace

MemoryProbeResult probe_stage_memory(const MemoryProbeRequest& request) {
  if (request.micro_batches.empty() || request.in_flight < 1) {
    throw std::invalid_argument(request.stage_path + ": a memory probe needs micro-batches");
  }
  MemoryProbeResult result;
  for (const auto& inputs : request.micro_batches) {
    for (const auto& value : inputs) result.inputs_bytes += tensor_bytes(value);
  }
  if (device_memory_measurable(request.device)) {
    // The context first (a daemon makes it at start), so that the host baseline has its share.
    const DeviceMemory card = read_device_memory(request.device);
    result.device_baseline_bytes = card.total_bytes - card.free_bytes - card.reserved_bytes;
  }
  result.baseline_bytes = base::read_process_memory().resident_bytes;
  const std::string checkpoint_path =
      (std::filesystem::path(request.scratch_dir) /
       ("probe-" + std::to_string(::getpid()) + ".ckpt"))
          .string();
  try {
    std::shared_ptr<stage::Stage> stage;
    std::unique_ptr<torch::optim::Optimizer> optimizer;
    // As job_setup does: the stage from its file, in training mode, and a fresh optimizer.
    auto load_stage = [&] {
      stage = stage::load_stage(request.stage_path);
      stage->to(request.device);  // as job_setup does, before the optimizer sees the parameters
      stage->train(true);
      std::vector<at::Tensor> parameters;
      for (const auto& p : stage->parameters()) parameters.push_back(p);
      optimizer = make_optimizer(request.optimizer, parameters);
    };
    {
      Phase phase("load", &result, request.device);
      load_stage();
    }
    std::vector<std::pair<std::string, at::Tensor>> boundary;  // StageWorker::mark_boundary
    std::vector<at::Tensor> stash;  // WeightStash: older versions of the parameters
    at::Tensor ring_flat, ring_segments;  // RingAllReduce's flat buffer and segments
    auto train = [&](int updates) {
      for (int update = 0; update < updates; ++update) {
        std::deque<Flight> flights;
        std::vector<at::Tensor> sending;  // the message of the last output, until the next
        size_t next = 0;
        size_t done = 0;
        const size_t count = request.micro_batches.size();
        while (done < count) {
          while (next < count && flights.size() < static_cast<size_t>(request.in_flight)) {
            Flight flight;
            for (const auto& value : request.micro_batches[next]) {
              if (value.isTensor()) {
                at::Tensor t = value.toTensor().detach().to(request.device, /*non_blocking=*/false,
                                                            /*copy=*/true);
                if (!request.root && t.is_floating_point()) t.requires_grad_(true);
                flight.received.emplace_back(t);
              } else {
                flight.received.push_back(value);
              }
            }
            flight.output = stage->forward(flight.received);
            sending.clear();
            std::vector<at::Tensor> outputs;
            collect_tensors(flight.output, &outputs);
            for (const auto& t : outputs) sending.push_back(t.detach().clone());
            flights.push_back(std::move(flight));
            ++next;
          }
          Flight flight = std::move(flights.front());
          flights.pop_front();
          std::vector<at::Tensor> outputs;
          collect_tensors(flight.output, &outputs);
          std::vector<at::Tensor> roots, grads;
          for (const auto& t : outputs) {
            if (!t.requires_grad()) continue;
            if (request.leaf) {
              // A loss that keeps a tensor the size of the output, as a cross-entropy does.
              at::Tensor f = t.to(at::kFloat);
              roots.push_back(f.dim() == 0 ? f : at::log_softmax(f, -1).sum());
              grads.push_back(at::ones({}, f.options()));
            } else {
              roots.push_back(t);
              grads.push_back(at::ones_like(t));  // the gradient a daemon receives
            }
          }
          if (!roots.empty()) torch::autograd::backward(roots, grads);
          std::vector<at::Tensor> sent_back;  // the gradients' message upstream
          for (const auto& value : flight.received) {
            if (value.isTensor() && value.toTensor().grad().defined()) {
              sent_back.push_back(value.toTensor().grad().clone());
            }
          }
          ++done;
        }
        sending.clear();
        {
          torch::NoGradGuard no_grad;
          if (request.stash_versions > 0) {
            if (static_cast<int64_t>(stash.size()) >=
                request.stash_versions * static_cast<int64_t>(stage->parameters().size())) {
              stash.erase(stash.begin(), stash.begin() + stage->parameters().size());
            }
            for (const auto& p : stage->parameters()) stash.push_back(p.detach().clone());
          }
          optimizer->step();
          optimizer->zero_grad();
          boundary.clear();
          for (const auto& buffer : stage->named_buffers()) {
            boundary.emplace_back(buffer.name, buffer.value.detach().clone());
          }
          if (request.ring && !ring_flat.defined()) {
            // What a ring of the job's state averages: parameters, Adam's two moments, buffers.
            int64_t elements = 0;
            for (const auto& p : stage->parameters()) elements += p.numel() * (p.requires_grad() ? 3 : 1);
            for (const auto& b : stage->buffers()) elements += b.numel();
            ring_flat = at::empty({elements}, at::kFloat);
            ring_flat.fill_(0);  // resident, as the ring's copy-in makes it
            // The segments in flight: two calls of 4 MiB each way on its link (ring_link.h),
            // and the all-gather's segments kept sealed to relay: at most four of 4 MiB a link
            // (RingLink::kMaxKept), pieces of the chunks it passes on, so no more than the flat
            // copy itself.
            const int64_t relayed = std::min<int64_t>(int64_t{4} * (4 << 20), elements * 4);
            ring_segments = at::zeros({4 * (4 << 20) + relayed}, at::kByte);
          }
        }
      }
    };
    {
      Phase phase("train", &result, request.device);
      train(request.updates);
    }
    {
      Phase phase("checkpoint", &result, request.device);
      StageCheckpoint c;  // StageWorker::write_checkpoint
      for (const auto& p : stage->named_parameters()) c.state.emplace_back(p.name, p.value.detach());
      c.state.insert(c.state.end(), boundary.begin(), boundary.end());
      c.random_state = random_state(request.device);
      c.optimizer = save_optimizer(*optimizer);
      save_checkpoint(c, checkpoint_path);
    }
    {
      // As a job resumed by this daemon: the stage loaded afresh, a new optimizer, the
      // checkpoint read and restored, then an update with everything in place.
      Phase phase("resume", &result, request.device);
      optimizer.reset();
      stage.reset();
      load_stage();
      {
        StageCheckpoint c = load_checkpoint(checkpoint_path);
        restore_stage_state(*stage, c.state);
        restore_optimizer(*optimizer, c.optimizer);
      }
      train(1);
    }
    {
      Phase phase("finish", &result, request.device);  // the trained stage, saved when the job ends
      stage->save(checkpoint_path + ".trained.pt");
    }
  } catch (const std::exception& e) {
    std::remove(checkpoint_path.c_str());
    std::remove((checkpoint_path + ".trained.pt").c_str());
    throw std::runtime_error(request.stage_path + ": the memory probe failed: " +
                             torch_support::torch_message(e));
  }
  std::remove(checkpoint_path.c_str());
  std::remove((checkpoint_path + ".trained.pt").c_str());
  return result;
}

}  // namespace ravnest::training
