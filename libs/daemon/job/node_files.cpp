#include "libs/daemon/job/node_files.h"

#include <filesystem>
#include <string>
#include <utility>

#include <spdlog/spdlog.h>

#include "libs/base/atomic_file.h"
#include "libs/base/printable.h"
#include "libs/config/daemon/memory_checks.h"
#include "libs/daemon/rpc/thread_bridge.h"
#include "libs/stage/stage_file.h"
#include "libs/torch_support/torch_compat.h"
#include "libs/training/device_memory.h"
#include "libs/wire/file_stream.h"
#include "libs/wire/kj_reason.h"
#include "libs/worker/compute_device.h"

namespace ravnest::daemon {

kj::Promise<void> NodeFiles::push_stage(PushStageCall context, wire::StreamSlot slot,
                                         uint64_t max_bytes) {
  auto params = context.getParams();
  const std::string metadata_json = params.getMetadataJson();
  const uint64_t size = params.getSize();
  auto opened = checked([&] {
    if (params.hasObsoleteStage() && params.getObsoleteStage().size() > 0) {
      throw std::runtime_error("the stage arrived whole in the call, as ravnest did before stages "
                               "streamed: push with a ravnest of this daemon's version");
    }
    wire::check_stream_size(size, max_bytes, "pushStage");
    if (job_.training()) throw std::runtime_error("busy: a job is running");
    // A stage whose measured peak exceeds the budget would fail its first job, or take the
    // machine down with it: refused before anything travels (and logged by the endpoint).
    const auto fits = [this](const config::NodeMetadata& pushed) { check_fits(pushed); };
    store_.check_stage_push(metadata_json, params.getSha256(), fits);
    // The bytes go to a temporary file beside stage.pt (removed if anything fails, or by the
    // next start after a crash); they replace the stored stage only once whole, checked and
    // a stage archive (TorchScript, or torch.export's .pt2 on LibTorch 2.x), so a push that
    // fails leaves the old stage as it was.
    return wire::FileSink::open(
        store_.dir(), store_.stage_path().filename().string(), size, params.getSha256(),
        [this, metadata_json, size](const std::filesystem::path& received) {
          if (job_.training()) throw std::runtime_error("busy: a job started while the stage arrived");
          // Random bytes that hash as announced are still no stage: refused here, not at the
          // first job. The archive's directory is checked, not the module loaded: loading would
          // hold the whole stage in memory during a push.
          const std::string what = "the pushed stage (" + std::to_string(size) + " bytes)";
          stage::StageFormat format;
          try {
            format = stage::stage_format_of(received.string());
          } catch (const std::exception& e) {
            // The temporary file's name means nothing to the requester.
            std::string reason = e.what();
            const std::string prefix = received.string() + ": ";
            if (reason.rfind(prefix, 0) == 0) reason = reason.substr(prefix.size());
            throw std::runtime_error(what + ": " + reason);
          }
          if (format == stage::StageFormat::kExported && torch_support::kTorchMajor < 2) {
            throw std::runtime_error(what + " is a torch.export archive (.pt2), which this "
                                     "daemon's " + torch_support::torch_description() +
                                     " cannot run: run ravnestd of the LibTorch 2.x build");
          }
          store_.commit_stage(received, size, metadata_json);
          job_.stage_stored();
          spdlog::info("stored stage {} ({} bytes)", job_.metadata().stage_sha256.substr(0, 12),
                       size);
        });
  });
  context.getResults().setSink(kj::mv(opened.sink));
  tasks_.add(opened.completion.attach(kj::mv(slot)).catch_([](kj::Exception&& e) {
    spdlog::warn("pushStage: {}", wire::kj_reason(e));
  }));
  return kj::READY_NOW;
}

void NodeFiles::check_fits(const config::NodeMetadata& pushed) const {
  const auto refusal = config::stage_memory_refusal(
      pushed.estimates, job_.memory().baseline_bytes(), job_.memory().read().budget);
  if (refusal) throw std::runtime_error(*refusal);
  if (pushed.estimates.device_peak_memory_bytes > 0) {
    const c10::Device device = training::compute_device(device_);
    if (training::device_memory_measurable(device)) {
      const auto on_card = config::stage_device_memory_refusal(
          pushed.estimates, device.str(), training::read_device_memory(device).total_bytes);
      if (on_card) throw std::runtime_error(*on_card);
    }
  }
}

kj::Promise<void> NodeFiles::push_metadata(PushMetadataCall context) {
  const std::string metadata_json = context.getParams().getMetadataJson();
  checked([&] {
    if (job_.busy()) throw std::runtime_error("busy: a job is loaded or running");
    store_.replace_metadata(metadata_json,
                            [this](const config::NodeMetadata& pushed) { check_fits(pushed); });
    job_.metadata_stored();
  });
  spdlog::info("stored new metadata for stage {}", job_.metadata().stage_sha256.substr(0, 12));
  return kj::READY_NOW;
}

kj::Promise<void> NodeFiles::push_file(PushFileCall context, wire::StreamSlot slot,
                                         uint64_t max_bytes) {
  auto params = context.getParams();
  const std::string name = params.getName();
  auto opened = checked([&] {
    wire::check_stream_size(params.getSize(), max_bytes, "pushFile");
    const auto [dir, file] = store_.shipped_file(name);  // refuses names that are not one
    return wire::FileSink::open(dir, file, params.getSize(), params.getSha256());
  });
  context.getResults().setSink(kj::mv(opened.sink));
  tasks_.add(opened.completion.attach(kj::mv(slot)).then([name]() {
    spdlog::info("stored file {}", base::printable(name, 300));
  }));
  return kj::READY_NOW;
}

kj::Promise<void> NodeFiles::fetch_stage(FetchStageCall context) {
  auto found = checked([&] {
    if (!store_.has_stage()) throw std::runtime_error("no stage stored");
    if (!context.getParams().hasSink()) {
      throw std::runtime_error("no sink to stream the stage into: fetch with a ravnest of this "
                               "daemon's version");
    }
    const auto path =
        std::filesystem::exists(store_.trained_path()) ? store_.trained_path() : store_.stage_path();
    return std::make_pair(path, base::read_file(store_.metadata_path().string()));
  });
  // Streamed in chunks, never read whole: a stage of several GB costs the daemon a chunk.
  return wire::stream_file(context.getParams().getSink(), found.first)
      .then([context, metadata_json = std::move(found.second)](wire::SentFile sent) mutable {
        auto results = context.getResults();
        results.setSize(sent.bytes);
        results.setSha256(sent.sha256);
        results.setMetadataJson(metadata_json);
      });
}

kj::Promise<void> NodeFiles::fetch_losses(FetchLossesCall context) {
  auto results = context.getResults();
  auto read = [](const std::filesystem::path& path) {
    return std::filesystem::is_regular_file(path) ? base::read_file(path.string()) : std::string();
  };
  results.setText(read(store_.losses_path()));
  results.setValidation(read(store_.validation_path()));
  return kj::READY_NOW;
}

kj::Promise<void> NodeFiles::fetch_predictions(FetchPredictionsCall context) {
  const auto path = checked([&] {
    if (!store_.has_stage() || !job_.metadata().returns_model_output) {
      throw std::runtime_error("not a leaf: predictions are kept by the leaf");
    }
    if (job_.training()) throw std::runtime_error("busy: a job is running");
    const auto path = store_.predictions_path();
    if (!std::filesystem::is_regular_file(path)) {
      throw std::runtime_error("no predictions: no prediction job finished here");
    }
    if (!context.getParams().hasSink()) {
      throw std::runtime_error("no sink to stream the predictions into: fetch with a ravnest of "
                               "this daemon's version");
    }
    return path;
  });
  return wire::stream_file(context.getParams().getSink(), path)
      .then([context](wire::SentFile sent) mutable {
        auto results = context.getResults();
        results.setSize(sent.bytes);
        results.setSha256(sent.sha256);
      });
}

}  // namespace ravnest::daemon
