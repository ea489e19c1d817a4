#include "libs/training/checkpoint.h"


#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string_view>
#include <vector>

#include <ATen/Functions.h>
#include <torch/csrc/autograd/grad_mode.h>
#include <torch/csrc/jit/serialization/import.h>
#include <torch/serialize/input-archive.h>
#include <torch/serialize/output-archive.h>

#include "libs/base/atomic_file.h"
#include "libs/base/printable.h"
#include "libs/base/sha256.h"
#include "libs/torch_support/torch_errors.h"

namespace ravnest::training {

namespace {

constexpr int64_t kFormat = 2;

// Arbitrary bytes as a uint8 tensor over the string's own bytes (archives keep tensors byte
// for byte): the optimizer's state is not copied once more to be written. Valid while `bytes` is.
at::Tensor bytes_tensor(const std::string& bytes) {
  if (bytes.empty()) return at::empty({0}, at::kByte);
  return at::from_blob(const_cast<char*>(bytes.data()), {static_cast<int64_t>(bytes.size())},
                       at::TensorOptions().dtype(at::kByte));
}

std::string tensor_bytes(const at::Tensor& t) {
  at::Tensor c = t.contiguous();
  return std::string(static_cast<const char*>(c.data_ptr()), static_cast<size_t>(c.numel()));
}

int64_t read_int(torch::serialize::InputArchive& archive, const std::string& key) {
  c10::IValue value;
  archive.read(key, value);
  return value.toInt();
}

// Where the optimizer's parameters are (its state follows them); the CPU when it has none.
c10::Device parameters_device(const torch::optim::Optimizer& optimizer) {
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) return p.device();
  }
  return c10::Device(c10::kCPU);
}

}  // namespace

std::vector<std::pair<std::string, at::Tensor>> copy_stage_state(const stage::Stage& stage) {
  std::vector<std::pair<std::string, at::Tensor>> state;
  for (const auto& p : stage.named_parameters()) state.emplace_back(p.name, p.value.detach().clone());
  for (const auto& b : stage.named_buffers()) state.emplace_back(b.name, b.value.detach().clone());
  return state;
}

void restore_stage_state(stage::Stage& stage,
                         const std::vector<std::pair<std::string, at::Tensor>>& state) {
  std::map<std::string, at::Tensor> own;
  for (const auto& p : stage.named_parameters()) own.emplace(p.name, p.value);
  for (const auto& b : stage.named_buffers()) own.emplace(b.name, b.value);
  if (own.size() != state.size()) {
    throw std::runtime_error("the checkpoint holds " + std::to_string(state.size()) +
                             " tensors, the stage " + std::to_string(own.size()));
  }
  torch::NoGradGuard no_grad;
  for (const auto& [name, saved] : state) {
    auto it = own.find(name);
    if (it == own.end()) throw std::runtime_error("the stage has no tensor " + name);
    if (it->second.sizes() != saved.sizes() || it->second.scalar_type() != saved.scalar_type()) {
      throw std::runtime_error("the checkpoint's " + name + " does not fit the stage's");
    }
    it->second.copy_(saved);
  }
}

std::string save_optimizer(const torch::optim::Optimizer& optimizer) {
  torch::serialize::OutputArchive archive;
  optimizer.save(archive);
  // Counted first, then written into a string of that size: appending to a growing string held
  // the old and the new buffer at each doubling, up to three times the state (a node's peak when
  // it writes a checkpoint).
  size_t total = 0;
  archive.save_to([&](const void*, size_t size) {
    total += size;
    return size;
  });
  std::string bytes;
  bytes.reserve(total);
  archive.save_to([&](const void* data, size_t size) {
    bytes.append(static_cast<const char*>(data), size);
    return size;
  });
  if (parameters_device(optimizer).is_cpu()) return bytes;
  // Its state lives where the parameters do: read back mapped to the CPU (the archive is a
  // TorchScript module) and written again, so a checkpoint holds no device tensors.
  std::istringstream written(bytes);
  torch::jit::Module host = torch::jit::load(written, c10::Device(c10::kCPU));
  std::ostringstream out;
  host.save(out);
  return out.str();
}

void restore_optimizer(torch::optim::Optimizer& optimizer, const std::string& bytes) {
  torch::serialize::InputArchive archive;
  archive.load_from(bytes.data(), bytes.size(), parameters_device(optimizer));
  optimizer.load(archive);
}

namespace {

// A checkpoint file is the archive's bytes followed by this tag, the SHA-256 of those bytes in
// hex, and a line break: a file damaged after it was written (flipped bytes, a truncation) is
// refused when read, instead of resuming from other weights. (The zip reader finds the archive
// from its end, so the trailer cannot go inside it.) A file without the trailer was written
// before checkpoints carried one and is read as it is.
constexpr std::string_view kChecksumTag = "\nravnest-checkpoint-sha256:";
constexpr size_t kTrailerSize = kChecksumTag.size() + 64 + 1;

}  // namespace

void save_checkpoint(const StageCheckpoint& c, const std::string& path) {
  try {
    torch::serialize::OutputArchive archive;
    archive.write("format", c10::IValue(kFormat));
    archive.write("identity", c10::IValue(c.identity));
    archive.write("cluster", c10::IValue(static_cast<int64_t>(c.cluster)));
    archive.write("position", c10::IValue(static_cast<int64_t>(c.position)));
    archive.write("updates", c10::IValue(static_cast<int64_t>(c.updates)));
    archive.write("batches", c10::IValue(static_cast<int64_t>(c.batches)));
    archive.write("epoch", c10::IValue(static_cast<int64_t>(c.epoch)));
    archive.write("lr_steps", c10::IValue(c.lr_steps));
    archive.write("reduce_round", c10::IValue(static_cast<int64_t>(c.reduce_round)));
    archive.write("shared_round", c10::IValue(static_cast<int64_t>(c.shared_round)));
    archive.write("random_state", c.random_state, /*is_buffer=*/true);
    if (c.next_random_state.defined()) {
      archive.write("next_random_state", c.next_random_state, /*is_buffer=*/true);
    }
    archive.write("losses", bytes_tensor(c.losses), /*is_buffer=*/true);
    archive.write("validation", bytes_tensor(c.validation), /*is_buffer=*/true);
    archive.write("data", bytes_tensor(c.data), /*is_buffer=*/true);
    if (c.has_loss_scale) {
      archive.write("loss_scale", c10::IValue(c.loss_scale));
      archive.write("loss_scale_growth_tracker", c10::IValue(c.loss_scale_growth_tracker));
    }
    archive.write("optimizer", bytes_tensor(c.optimizer), /*is_buffer=*/true);
    c10::List<std::string> names;
    for (size_t i = 0; i < c.state.size(); ++i) {
      names.push_back(c.state[i].first);
      archive.write("state_" + std::to_string(i), c.state[i].second.to(c10::kCPU),
                    /*is_buffer=*/true);
    }
    archive.write("state_names", c10::IValue(names));
    if (!c.outer.empty()) {
      c10::List<std::string> outer_names;
      for (size_t i = 0; i < c.outer.size(); ++i) {
        outer_names.push_back(c.outer[i].first);
        archive.write("outer_" + std::to_string(i), c.outer[i].second.to(c10::kCPU),
                      /*is_buffer=*/true);
      }
      archive.write("outer_names", c10::IValue(outer_names));
    }
    // Streamed to the file and hashed on the way: the archive is never whole in memory (it
    // was twice, as a stream's buffer and its copy: a checkpoint's write was a node's peak), and
    // its pages leave the page cache as they reach the disk (base::AtomicFileWriter).
    base::AtomicFileWriter out(path);
    base::Sha256 hash;
    // Nothing may throw inside LibTorch's writer (its destructor writes the archive's end again,
    // and a second throw there terminates the process): the first failure is kept and rethrown.
    std::exception_ptr failure;
    archive.save_to([&](const void* data, size_t size) -> size_t {
      if (failure) return size;
      try {
        hash.update(data, size);
        out.write(data, size);
      } catch (...) {
        failure = std::current_exception();
      }
      return size;
    });
    if (failure) std::rethrow_exception(failure);
    const std::string trailer = std::string(kChecksumTag) + hash.hex() + "\n";
    out.write(trailer.data(), trailer.size());
    out.commit();
  } catch (const std::exception& e) {
    throw std::runtime_error("cannot write the checkpoint " + path + ": " +
                             torch_support::torch_message(e));
  }
}

namespace {

// pread of `n` bytes at `pos`, as many as there are.
size_t read_at(int fd, uint64_t pos, void* buf, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::pread(fd, static_cast<char*>(buf) + done, n - done,
                                static_cast<off_t>(pos + done));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

// The size of the archive in the file `fd` of `file_size` bytes, once its trailer's checksum
// matches its bytes (hashed in bounded chunks); throws naming `path` when it does not.
// `*has_trailer` false: a file written before checkpoints carried one (all of it is the archive).
uint64_t checked_archive_size(int fd, const std::string& path, uint64_t file_size,
                              bool* has_trailer) {
  *has_trailer = false;
  if (file_size < kTrailerSize) return file_size;
  std::string trailer(kTrailerSize, '\0');
  if (read_at(fd, file_size - kTrailerSize, trailer.data(), kTrailerSize) != kTrailerSize) {
    throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
  }
  if (std::string_view(trailer).substr(0, kChecksumTag.size()) != kChecksumTag) return file_size;
  *has_trailer = true;
  const uint64_t archive_size = file_size - kTrailerSize;
  const std::string written = trailer.substr(kChecksumTag.size(), 64);
  base::Sha256 hash;
  std::vector<char> chunk(1 << 20);
  for (uint64_t pos = 0; pos < archive_size;) {
    const size_t want = static_cast<size_t>(std::min<uint64_t>(chunk.size(), archive_size - pos));
    if (read_at(fd, pos, chunk.data(), want) != want) {
      throw std::runtime_error(path + ": cannot read: it changed or shrank while read");
    }
    hash.update(chunk.data(), want);
    pos += want;
  }
  const std::string actual = hash.hex();
  if (actual != written) {
    throw std::runtime_error(path + ": damaged: its bytes hash to " + actual.substr(0, 12) +
                             ", not the " + base::printable(written.substr(0, 12)) +
                             " it was written with");
  }
  return archive_size;
}

// The checkpoint file at `path`, open for reading; throws naming it.
struct OpenCheckpoint {
  explicit OpenCheckpoint(const std::string& path) {
    // O_NONBLOCK: a FIFO in its place must not hang the daemon in open(); files ignore it.
    fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
    if (fd < 0) throw std::runtime_error(path + ": cannot read: " + std::strerror(errno));
    struct stat info {};
    if (::fstat(fd, &info) != 0) {
      const std::string why = std::strerror(errno);
      ::close(fd);
      throw std::runtime_error(path + ": " + why);
    }
    if (!S_ISREG(info.st_mode)) {
      ::close(fd);
      throw std::runtime_error(path + ": not a readable checkpoint: not a file");
    }
    size = static_cast<uint64_t>(info.st_size);
  }
  ~OpenCheckpoint() { ::close(fd); }
  OpenCheckpoint(const OpenCheckpoint&) = delete;
  OpenCheckpoint& operator=(const OpenCheckpoint&) = delete;
  int fd = -1;
  uint64_t size = 0;
};

}  // namespace

bool checkpoint_intact(const std::string& path) {
  try {
    bool has_trailer = false;
    {
      OpenCheckpoint file(path);
      checked_archive_size(file.fd, path, file.size, &has_trailer);
    }
    // Written before checkpoints carried a checksum: intact if it reads.
    if (!has_trailer) load_checkpoint(path);
    return true;
  } catch (const std::exception&) {
    return false;
  }
}

bool checkpoint_usable(const std::string& path, const std::string& identity, uint64_t updates,
                       int cluster, int position) {
  try {
    const StageCheckpoint c = load_checkpoint(path);
    return c.identity == identity && c.updates == updates &&
           (cluster < 0 || (c.cluster == cluster && c.position == position));
  } catch (const std::exception&) {
    return false;
  }
}

StageCheckpoint load_checkpoint(const std::string& path) {
  // Read in place, a record at a time, after hashing it in bounded chunks: the file is never
  // whole in memory beside the tensors it holds (a resume would have needed twice the state).
  OpenCheckpoint file(path);
  const int fd = file.fd;
  bool has_trailer = false;
  const uint64_t archive_size = checked_archive_size(fd, path, file.size, &has_trailer);
  auto read_at = [fd](uint64_t pos, void* buf, size_t n) { return training::read_at(fd, pos, buf, n); };
  try {
    torch::serialize::InputArchive archive;
    archive.load_from(
        [&](uint64_t pos, void* buf, size_t n) -> size_t {
          if (pos >= archive_size) return 0;
          return read_at(pos, buf, static_cast<size_t>(std::min<uint64_t>(n, archive_size - pos)));
        },
        [&]() -> size_t { return static_cast<size_t>(archive_size); });
    if (read_int(archive, "format") != kFormat) throw std::runtime_error("unknown format");
    StageCheckpoint c;
    c10::IValue value;
    archive.read("identity", value);
    c.identity = value.toStringRef();
    c.cluster = static_cast<int>(read_int(archive, "cluster"));
    c.position = static_cast<int>(read_int(archive, "position"));
    c.updates = static_cast<uint64_t>(read_int(archive, "updates"));
    c.batches = static_cast<uint64_t>(read_int(archive, "batches"));
    c.epoch = static_cast<uint32_t>(read_int(archive, "epoch"));
    c.lr_steps = read_int(archive, "lr_steps");
    c.reduce_round = static_cast<uint64_t>(read_int(archive, "reduce_round"));
    c.shared_round = static_cast<uint64_t>(read_int(archive, "shared_round"));
    archive.read("random_state", c.random_state, /*is_buffer=*/true);
    archive.try_read("next_random_state", c.next_random_state, /*is_buffer=*/true);
    at::Tensor bytes;
    archive.read("losses", bytes, /*is_buffer=*/true);
    c.losses = tensor_bytes(bytes);
    c.has_validation = archive.try_read("validation", bytes, /*is_buffer=*/true);
    if (c.has_validation) c.validation = tensor_bytes(bytes);
    if (archive.try_read("data", bytes, /*is_buffer=*/true)) c.data = tensor_bytes(bytes);
    if (archive.try_read("loss_scale", value)) {
      c.has_loss_scale = true;
      c.loss_scale = value.toDouble();
      c.loss_scale_growth_tracker = read_int(archive, "loss_scale_growth_tracker");
    }
    archive.read("optimizer", bytes, /*is_buffer=*/true);
    c.optimizer = tensor_bytes(bytes);
    bytes = at::Tensor();  // not held beside its copy while the state is read
    archive.read("state_names", value);
    const auto names = value.toList();
    for (size_t i = 0; i < names.size(); ++i) {
      at::Tensor t;
      archive.read("state_" + std::to_string(i), t, /*is_buffer=*/true);
      c.state.emplace_back(names.get(i).toStringRef(), t);
    }
    if (archive.try_read("outer_names", value)) {
      const auto outer_names = value.toList();
      for (size_t i = 0; i < outer_names.size(); ++i) {
        at::Tensor t;
        archive.read("outer_" + std::to_string(i), t, /*is_buffer=*/true);
        c.outer.emplace_back(outer_names.get(i).toStringRef(), t);
      }
    }
    return c;
  } catch (const std::exception& e) {
    throw std::runtime_error(path + ": not a readable checkpoint: " + torch_support::torch_message(e));
  }
}

}  // namespace ravnest::training
