// read_mnist(): MNIST idx files (dataset.h).
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <utility>

#include <ATen/ATen.h>

#include "libs/data/dataset.h"
#include "libs/data/reader_internal.h"

namespace ravnest::data {
namespace {

namespace fs = std::filesystem;
using detail::fail;
using detail::shape_text;

uint32_t big_endian_u32(const std::string& bytes, size_t at) {
  const auto* p = reinterpret_cast<const unsigned char*>(bytes.data()) + at;
  return (uint32_t(p[0]) << 24) | (uint32_t(p[1]) << 16) | (uint32_t(p[2]) << 8) | uint32_t(p[3]);
}

std::string hex32(uint32_t value) {
  char text[16];
  std::snprintf(text, sizeof(text), "0x%08x", value);
  return text;
}

// An idx file: magic (0x0000 08 <dims>), dims as big-endian u32, then uint8 data.
at::Tensor read_idx(const std::string& path, uint32_t expected_magic, const char* kind) {
  const std::string bytes = read_maybe_gzip(path);
  const uint32_t dims = expected_magic & 0xff;
  if (bytes.size() < 4) fail(path, std::string("not an MNIST idx ") + kind + " file (too short)");
  const uint32_t magic = big_endian_u32(bytes, 0);
  if (magic != expected_magic) {
    fail(path, std::string("not an MNIST idx ") + kind + " file: magic " + hex32(magic) + ", expected " +
                   hex32(expected_magic));
  }
  const size_t header = 4 + 4 * dims;
  if (bytes.size() < header) fail(path, "truncated idx header");
  std::vector<int64_t> shape;
  uint64_t count = 1;
  bool overflow = false;
  for (uint32_t d = 0; d < dims; ++d) {
    shape.push_back(big_endian_u32(bytes, 4 + 4 * d));
    // Three 32-bit sizes can wrap 64 bits to the file's size: refused before at::empty sees them.
    overflow |= __builtin_mul_overflow(count, static_cast<uint64_t>(shape.back()), &count);
  }
  if (overflow) {
    fail(path, "size mismatch: the header announces " + shape_text(shape) +
                   " bytes of data, more than 2^64, the file has " +
                   std::to_string(bytes.size() - header));
  }
  if (bytes.size() - header != count) {
    fail(path, "size mismatch: the header announces " + std::to_string(count) + " bytes of data (" +
                   shape_text(shape) + "), the file has " + std::to_string(bytes.size() - header));
  }
  at::Tensor out = at::empty(shape, at::TensorOptions().dtype(at::kByte));
  if (count) std::memcpy(out.data_ptr<uint8_t>(), bytes.data() + header, count);
  return out;
}

std::string first_existing(const std::vector<fs::path>& candidates) {
  for (const auto& c : candidates) {
    if (fs::is_regular_file(c)) return c.string();
  }
  return "";
}

}  // namespace

namespace detail {

std::pair<std::string, std::string> mnist_files(const std::string& path, Split split) {
  std::error_code ec;
  std::string images, labels;
  if (fs::is_directory(path, ec)) {
    const std::string prefix = split == Split::kTrain ? "train" : "t10k";
    std::vector<fs::path> dirs = {fs::path(path), fs::path(path) / "MNIST" / "raw", fs::path(path) / "raw"};
    for (const auto& dir : dirs) {
      std::vector<fs::path> image_names, label_names;
      for (const char* sep : {"-", "."}) {
        for (const char* gz : {"", ".gz"}) {
          image_names.push_back(dir / (prefix + "-images" + sep + "idx3-ubyte" + gz));
          label_names.push_back(dir / (prefix + "-labels" + sep + "idx1-ubyte" + gz));
        }
      }
      images = first_existing(image_names);
      labels = first_existing(label_names);
      if (!images.empty()) break;
    }
    if (images.empty()) {
      fail(path, "no " + prefix + "-images-idx3-ubyte[.gz] in this directory (nor in MNIST/raw/, raw/)");
    }
    if (labels.empty()) fail(path, "no " + prefix + "-labels-idx1-ubyte[.gz] next to " + images);
  } else {
    if (!fs::exists(path, ec)) fail(path, "no such file or directory");
    images = path;
    const std::string name = fs::path(path).filename().string();
    std::string label_name = name;
    for (const auto& [from, to] : std::vector<std::pair<std::string, std::string>>{
             {"images-idx3", "labels-idx1"}, {"images.idx3", "labels.idx1"}}) {
      const auto at = label_name.find(from);
      if (at != std::string::npos) {
        label_name.replace(at, from.size(), to);
        break;
      }
    }
    if (label_name == name) {
      fail(path, "cannot tell the labels file from this name: expected an images file named like "
                 "train-images-idx3-ubyte[.gz], or give the directory");
    }
    std::vector<fs::path> candidates = {fs::path(path).parent_path() / label_name};
    // The labels may be compressed when the images are not, or the other way round.
    if (label_name.size() > 3 && label_name.substr(label_name.size() - 3) == ".gz") {
      candidates.push_back(fs::path(path).parent_path() / label_name.substr(0, label_name.size() - 3));
    } else {
      candidates.push_back(fs::path(path).parent_path() / (label_name + ".gz"));
    }
    labels = first_existing(candidates);
    if (labels.empty()) fail(path, "the labels file " + candidates[0].string() + " does not exist");
  }
  return {images, labels};
}

}  // namespace detail

Dataset read_mnist(const std::string& path, Split split) {
  const auto [images, labels] = detail::mnist_files(path, split);
  at::Tensor x = read_idx(images, 0x00000803, "images");
  at::Tensor y = read_idx(labels, 0x00000801, "labels");
  if (x.size(0) != y.size(0)) {
    fail(images, std::to_string(x.size(0)) + " images but " + labels + " has " + std::to_string(y.size(0)) +
                     " labels");
  }
  if (x.size(0) == 0) fail(images, "empty dataset (no images)");
  return Dataset({x.unsqueeze(1)}, y.to(at::kLong), images, /*bytes_to_unit_float=*/true);
}

}  // namespace ravnest::data
