// The inputs the dataset fuzzers of tests/fuzz found, kept there as
// tests/fuzz/dataset_*/regression-*: each is refused with a one-line std::runtime_error naming
// the file (before the fixes: a heap overflow, a 4 GiB allocation, a c10::Error with a backtrace,
// signed overflow, a message with control bytes).
#include <catch2/catch.hpp>

#include <filesystem>
#include <functional>
#include <string>

#include "libs/base/atomic_file.h"
#include "libs/data/dataset.h"
#include "tests/support/test_env.h"

using namespace ravnest;
namespace fs = std::filesystem;

namespace {

fs::path corpus(const std::string& target) {
  return fs::path(test::source_dir()) / "tests" / "fuzz" / target;
}

std::string refusal(const std::function<void()>& read) {
  try {
    read();
  } catch (const std::runtime_error& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    CHECK(message.find('\r') == std::string::npos);
    return message;
  }
  FAIL("accepted");
  return "";
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace

TEST_CASE("fuzz regressions: torch.save files that lie", "[fuzz]") {
  const fs::path dir = corpus("dataset_tensors");
  auto read = [](const fs::path& file) {
    return refusal([&] { data::read_tensors(file.string()); });
  };
  // Storages whose pickle claims 254 floats and 127 int64 for records of 6 and 3: LibTorch 1.13
  // made them tensors reaching past their buffers, and reading the dataset overflowed the heap.
  CHECK(read(dir / "regression-storage-numel-past-record.pt") ==
        (dir / "regression-storage-numel-past-record.pt").string() +
            ": the labels are a tensor of [127] reaching past its storage of 24 bytes (a malformed "
            "file)");
  // A BINUNICODE announcing 4 GiB: LibTorch reserved it before reading.
  CHECK(contains(read(dir / "regression-unpickler-4-GiB-string"),
                 ": a malformed pickle in data.pkl: a length past the end"));
  CHECK(contains(read(dir / "regression-archive-without-version"),
                 ": not a file saved with torch.save that LibTorch can read"));
}

TEST_CASE("fuzz regressions: MNIST and CSV", "[fuzz]") {
  test::TempDir tmp;
  // The fuzz input holds both idx files: the labels' length (2 bytes), the labels, the images.
  const std::string input =
      base::read_file((corpus("dataset_mnist") / "regression-dims-wrap-64-bits").string());
  const size_t labels = static_cast<unsigned char>(input[0]) | (static_cast<unsigned char>(input[1]) << 8);
  test::write_text(tmp / "train-labels-idx1-ubyte", input.substr(2, labels));
  test::write_text(tmp / "train-images-idx3-ubyte", input.substr(2 + labels));
  // [4, 2^31, 2^31] bytes wraps 64 bits to 0, the size of the data: at::empty threw c10::Error.
  CHECK(refusal([&] { data::read_mnist(tmp.path().string(), data::Split::kTrain); }) ==
        (tmp / "train-images-idx3-ubyte").string() +
            ": size mismatch: the header announces [4, 2147483648, 2147483648] bytes of data, more "
            "than 2^64, the file has 0");

  test::write_text(tmp / "a.csv", "1,2,3,4,0\n5,6,7,8,1\n");
  data::CsvOptions options;
  options.header = false;
  options.input_shape = {int64_t{1} << 32, int64_t{1} << 32, 2};  // signed overflow before
  CHECK(refusal([&] { data::read_csv((tmp / "a.csv").string(), options); }) ==
        (tmp / "a.csv").string() +
            ": input_shape [4294967296, 4294967296, 2] holds more than 2^63 values but each row "
            "has 4 features");

  test::write_text(tmp / "b.csv", "a,b,c\x1b[2J\r\x01,d\n1,2,3,4\n");
  data::CsvOptions named;
  named.label_column = "label";
  CHECK(refusal([&] { data::read_csv((tmp / "b.csv").string(), named); }) ==
        (tmp / "b.csv").string() +
            ": no column named 'label' in the header (a, b, c\\x1b[2J\\x0d\\x01, d)");
}
