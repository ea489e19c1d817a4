// read_cifar10(): CIFAR-10 binary batches (dataset.h).
#include <cstring>
#include <filesystem>
#include <map>

#include <ATen/ATen.h>

#include "libs/data/dataset.h"
#include "libs/data/reader_internal.h"

namespace ravnest::data {
namespace {

namespace fs = std::filesystem;
using detail::fail;

}  // namespace

namespace detail {

std::vector<std::string> cifar10_files(const std::string& path, Split split) {
  std::error_code ec;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    fs::path dir(path);
    if (!fs::exists(dir / "test_batch.bin") && !fs::exists(dir / "data_batch_1.bin") &&
        fs::is_directory(dir / "cifar-10-batches-bin")) {
      dir /= "cifar-10-batches-bin";
    }
    if (split == Split::kTrain) {
      std::map<int, std::string> numbered;
      for (const auto& entry : fs::directory_iterator(dir)) {
        const std::string name = entry.path().filename().string();
        if (name.rfind("data_batch_", 0) == 0 && name.size() > 15 && name.substr(name.size() - 4) == ".bin") {
          try {
            numbered[std::stoi(name.substr(11, name.size() - 15))] = entry.path().string();
          } catch (const std::exception&) {
          }
        }
      }
      for (const auto& [n, file] : numbered) files.push_back(file);
      if (files.empty()) fail(path, "no data_batch_*.bin in this directory (CIFAR-10 binary version)");
    } else {
      if (!fs::exists(dir / "test_batch.bin")) fail(path, "no test_batch.bin in this directory");
      files.push_back((dir / "test_batch.bin").string());
    }
  } else {
    files.push_back(path);
  }
  return files;
}

}  // namespace detail

Dataset read_cifar10(const std::string& path, Split split) {
  constexpr int64_t kRecord = 1 + 3 * 32 * 32;
  const std::vector<std::string> files = detail::cifar10_files(path, split);
  std::vector<std::string> contents;
  int64_t total = 0;
  for (const auto& file : files) {
    contents.push_back(read_maybe_gzip(file));
    const auto size = static_cast<int64_t>(contents.back().size());
    if (size % kRecord != 0) {
      fail(file, "size " + std::to_string(size) + " is not a multiple of 3073 bytes (1 label byte + 3072 "
                 "pixel bytes per image): not a CIFAR-10 binary batch");
    }
    total += size / kRecord;
  }
  if (total == 0) fail(files.front(), "empty dataset (no images)");
  at::Tensor x = at::empty({total, 3, 32, 32}, at::TensorOptions().dtype(at::kByte));
  at::Tensor y = at::empty({total}, at::TensorOptions().dtype(at::kLong));
  uint8_t* px = x.data_ptr<uint8_t>();
  int64_t* py = y.data_ptr<int64_t>();
  int64_t row = 0;
  for (size_t f = 0; f < files.size(); ++f) {
    const auto* bytes = reinterpret_cast<const uint8_t*>(contents[f].data());
    const int64_t records = static_cast<int64_t>(contents[f].size()) / kRecord;
    for (int64_t r = 0; r < records; ++r, ++row) {
      const uint8_t* record = bytes + r * kRecord;
      if (record[0] >= 10) {
        fail(files[f], "record " + std::to_string(r + 1) + ": label " + std::to_string(record[0]) +
                           " is out of range [0, 10)");
      }
      py[row] = record[0];
      std::memcpy(px + row * (kRecord - 1), record + 1, kRecord - 1);
    }
  }
  return Dataset({x}, y, files.size() == 1 ? files.front() : path, /*bytes_to_unit_float=*/true);
}

}  // namespace ravnest::data
