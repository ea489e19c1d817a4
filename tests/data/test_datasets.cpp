// Datasets (CSV[.gz], MNIST idx, CIFAR-10 binary, torch.save'd tensors), their errors, the batch
// order (reproducible, equal to Python's torch.randperm) and the micro-batch split.
#include <catch2/catch.hpp>

#include <limits>

#include <sys/stat.h>
#include <zlib.h>

#include <algorithm>
#include <fstream>
#include <functional>
#include <sstream>

#include <ATen/ATen.h>

#include "libs/base/config_error.h"
#include "libs/config/job/job_spec.h"
#include "libs/data/batch_order.h"
#include "libs/data/dataset.h"
#include "libs/data/dataset_files.h"
#include "libs/data/epoch_orders.h"
#include "tests/support/test_env.h"

using namespace ravnest;
using data::BatchOrder;
using data::Dataset;
using data::Split;

namespace {

void write_bytes(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  REQUIRE(out.good());
}

void write_gzip(const std::filesystem::path& path, const std::string& bytes) {
  gzFile file = gzopen(path.c_str(), "wb");
  REQUIRE(file != nullptr);
  REQUIRE(gzwrite(file, bytes.data(), static_cast<unsigned>(bytes.size())) == static_cast<int>(bytes.size()));
  REQUIRE(gzclose(file) == Z_OK);
}

std::string be32(uint32_t v) {
  return std::string{char(v >> 24), char((v >> 16) & 0xff), char((v >> 8) & 0xff), char(v & 0xff)};
}

// An idx images file of n images rows x cols with pixel (i, r, c) = (i * 7 + r * cols + c) % 256.
std::string idx_images(uint32_t n, uint32_t rows, uint32_t cols) {
  std::string out = be32(0x803) + be32(n) + be32(rows) + be32(cols);
  for (uint32_t i = 0; i < n; ++i)
    for (uint32_t p = 0; p < rows * cols; ++p) out += char((i * 7 + p) % 256);
  return out;
}

std::string idx_labels(uint32_t n) {
  std::string out = be32(0x801) + be32(n);
  for (uint32_t i = 0; i < n; ++i) out += char(i % 10);
  return out;
}

// n CIFAR records: label (first + i) % 10, pixels (i + p) % 256.
std::string cifar_records(int n, int first) {
  std::string out;
  for (int i = 0; i < n; ++i) {
    out += char((first + i) % 10);
    for (int p = 0; p < 3072; ++p) out += char((i + first + p) % 256);
  }
  return out;
}

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const std::exception& e) {
    const std::string message = e.what();
    CHECK(message.find('\n') == std::string::npos);
    return message;
  }
  FAIL("expected an error");
  return "";
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

config::DataSpec csv_spec(const std::string& train, const std::string& validation = "") {
  config::DataSpec spec;
  spec.format = config::DataFormat::kCsv;
  spec.train = {train, train};
  if (!validation.empty()) spec.validation = {validation, validation};
  spec.label_column = "label";
  return spec;
}

const char* kCsv =
    "a,b,label,c\n"
    "1,2,0,3\n"
    "4,5,1,6\r\n"
    "\n"
    "7,8,2,9.5\n"
    " -1 , 1e1 , 1 , 0 \n";

}  // namespace

TEST_CASE("CSV: features, labels by name, reshape, scale, plain and gzip") {
  test::TempDir dir;
  write_bytes(dir / "d.csv", kCsv);
  write_gzip(dir / "d.csv.gz", kCsv);
  write_gzip(dir / "gz_without_suffix", kCsv);
  for (const char* name : {"d.csv", "d.csv.gz", "gz_without_suffix"}) {
    INFO(name);
    data::CsvOptions options;
    options.label_column = "label";
    options.input_shape = {3, 1};
    options.scale = 0.5;
    const Dataset d = data::read_csv((dir / name).string(), options);
    REQUIRE(d.size() == 4);
    REQUIRE(d.raw_inputs().size() == 1);
    CHECK(d.raw_inputs()[0].sizes() == at::IntArrayRef({4, 3, 1}));
    CHECK(d.labels().scalar_type() == at::kLong);
    CHECK(at::equal(d.labels(), at::tensor({0, 1, 2, 1}, at::kLong)));
    const auto expected = at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f, 7.f, 8.f, 9.5f, -1.f, 10.f, 0.f}).reshape({4, 3, 1}) * 0.5;
    CHECK(at::equal(d.raw_inputs()[0], expected));
    const data::Batch b = d.get({3, 0});
    CHECK(at::equal(b.labels, at::tensor({1, 0}, at::kLong)));
    CHECK(at::equal(b.inputs[0], expected.index_select(0, at::tensor({3, 0}, at::kLong))));
    const data::Batch r = d.get_range(1, 2);
    CHECK(at::equal(r.labels, at::tensor({1, 2}, at::kLong)));
    const data::Batch s = b.slice(1, 2);
    CHECK(at::equal(s.labels, at::tensor({0}, at::kLong)));
  }
}

TEST_CASE("CSV: without header, label by index; float labels") {
  test::TempDir dir;
  write_bytes(dir / "n.csv", "0.5,1,2\n1.5,3,4\n");
  data::CsvOptions options;
  options.header = false;
  options.label_index = 0;
  Dataset d = data::read_csv((dir / "n.csv").string(), options);
  CHECK(d.labels().scalar_type() == at::kFloat);
  CHECK(at::equal(d.labels(), at::tensor({0.5f, 1.5f})));
  CHECK(at::equal(d.raw_inputs()[0], at::tensor({1.f, 2.f, 3.f, 4.f}).reshape({2, 2})));
  options.label_index = -1;  // the default: last column
  d = data::read_csv((dir / "n.csv").string(), options);
  CHECK(at::equal(d.labels(), at::tensor({2, 4}, at::kLong)));
}

TEST_CASE("CSV errors name the file, the line and the column") {
  test::TempDir dir;
  const std::string f = (dir / "bad.csv").string();
  data::CsvOptions options;
  options.label_column = "label";
  auto error = [&](const std::string& text, data::CsvOptions o) {
    write_bytes(f, text);
    return error_of([&] { data::read_csv(f, o); });
  };
  CHECK(error("a,label\n1,2\n3\n", options) == f + ": line 3: expected 2 columns, got 1");
  CHECK(error("a,label\n1,2\n1,2,3\n", options) == f + ": line 3: expected 2 columns, got 3");
  CHECK(error("a,label\n1,2\nx1,2\n", options) == f + ": line 3, column 1 ('a'): non-numeric value 'x1'");
  CHECK(error("a,label\n1,\n", options) == f + ": line 2, column 2 ('label'): non-numeric value ''");
  CHECK(error("a,label\n1,nan\n", options) == f + ": line 2, column 2 ('label'): non-numeric value 'nan'");
  // Issue 28's probe: 1e39 became inf as float32 and the job trained NaN weights with rc 0.
  CHECK(error("a,label\n1,2\n1e39,2\n", options) ==
        f + ": line 3, column 1 ('a'): 1e39 does not fit in float32 (at most 3.4e38 in magnitude)");
  CHECK(error("a,label\n-3.5e38,2\n", options) ==
        f + ": line 2, column 1 ('a'): -3.5e38 does not fit in float32 (at most 3.4e38 in magnitude)");
  CHECK_NOTHROW(data::read_csv((write_bytes(f, "a,label\n3.4e38,1\n"), f), options));
  // ... and a label, which becomes float32 once it is no exact integer of int64.
  CHECK(error("a,label\n1,2\n1,1e39\n", options) ==
        f + ": line 3, column 2 ('label'): 1e39 does not fit in float32 (at most 3.4e38 in magnitude)");
  data::CsvOptions scaled = options;
  scaled.scale = 1e30;
  CHECK(error("a,label\n1,2\n1e10,2\n", scaled) ==
        f + ": scale 1e+30 makes a value overflow float32 (at most 3.4e38 in magnitude)");
  CHECK(error("a,lbl\n1,2\n", options) == f + ": no column named 'label' in the header (a, lbl)");
  CHECK(error("a,label\n", options) == f + ": empty dataset (no data rows)");
  CHECK(error("", options) == f + ": empty dataset (no data rows)");
  data::CsvOptions classes = options;
  classes.num_classes = 3;
  CHECK(error("a,label\n1,2\n\n1,3\n", classes) == f + ": row 2 (line 4): label 3 is out of range [0, 3)");
  CHECK(error("a,label\n1,-1\n", classes) == f + ": row 1 (line 2): label -1 is out of range [0, 3)");
  CHECK(error("a,label\n1,0.5\n", classes) == f + ": row 1 (line 2): label 0.5 is out of range [0, 3)");
  data::CsvOptions shaped = options;
  shaped.input_shape = {2, 2};
  CHECK(error("a,b,c,label\n1,2,3,0\n", shaped) ==
        f + ": input_shape [2, 2] holds 4 values but each row has 3 features");
  data::CsvOptions indexed;
  indexed.header = false;
  indexed.label_index = 5;
  CHECK(error("1,2\n", indexed) == f + ": label column index 5 is out of range: the file has 2 columns");
  CHECK(error_of([&] { data::read_csv((dir / "none.csv").string(), options); }) ==
        (dir / "none.csv").string() + ": no such file");
  write_bytes(dir / "trunc.csv.gz", "");
  {
    // A gzip stream cut short.
    write_gzip(dir / "full.gz", std::string(5000, 'x'));
    std::ifstream in(dir / "full.gz", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    write_bytes(dir / "trunc.csv.gz", bytes.substr(0, bytes.size() / 2));
  }
  CHECK(contains(error_of([&] { data::read_csv((dir / "trunc.csv.gz").string(), options); }),
                 (dir / "trunc.csv.gz").string() + ": read error"));
}

TEST_CASE("load_dataset: the job's CSV, the validation split, num_classes") {
  test::TempDir dir;
  write_bytes(dir / "t.csv", "x,label\n1,0\n2,1\n");
  write_bytes(dir / "v.csv", "x,label\n3,1\n");
  config::DataSpec spec = csv_spec((dir / "t.csv").string(), (dir / "v.csv").string());
  spec.num_classes = 2;
  CHECK(data::load_dataset(spec, Split::kTrain).size() == 2);
  CHECK(data::load_dataset(spec, Split::kValidation).size() == 1);
  spec.num_classes = 1;
  CHECK(contains(error_of([&] { data::load_dataset(spec, Split::kTrain); }), "label 1 is out of range [0, 1)"));
  spec.validation = {};
  CHECK_THROWS_AS(data::load_dataset(spec, Split::kValidation), base::ConfigError);
}

TEST_CASE("MNIST idx: directory or images file, plain or gzip") {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "raw");
  write_bytes(dir / "raw" / "train-images-idx3-ubyte", idx_images(5, 4, 3));
  write_gzip(dir / "raw" / "train-labels-idx1-ubyte.gz", idx_labels(5));
  write_gzip(dir / "raw" / "t10k-images-idx3-ubyte.gz", idx_images(2, 4, 3));
  write_bytes(dir / "raw" / "t10k-labels-idx1-ubyte", idx_labels(2));

  config::DataSpec spec;
  spec.format = config::DataFormat::kMnist;
  spec.train = {"x", dir.path().string()};
  spec.validation = {"x", dir.path().string()};
  spec.num_classes = 10;
  const Dataset train = data::load_dataset(spec, Split::kTrain);
  const Dataset val = data::load_dataset(spec, Split::kValidation);
  CHECK(train.size() == 5);
  CHECK(val.size() == 2);
  const data::Batch b = train.get({4, 1});
  REQUIRE(b.inputs.size() == 1);
  CHECK(b.inputs[0].scalar_type() == at::kFloat);
  CHECK(b.inputs[0].sizes() == at::IntArrayRef({2, 1, 4, 3}));
  CHECK(b.inputs[0][0][0][1][2].item<float>() == static_cast<float>((4 * 7 + 5) % 256) / 255.f);
  CHECK(at::equal(b.labels, at::tensor({4, 1}, at::kLong)));

  // An images file names its labels file.
  const Dataset by_file = data::read_mnist((dir / "raw" / "t10k-images-idx3-ubyte.gz").string(), Split::kTrain);
  CHECK(by_file.size() == 2);

  // Errors.
  write_bytes(dir / "a-images-idx3-ubyte", idx_labels(3));
  write_bytes(dir / "a-labels-idx1-ubyte", idx_labels(3));
  CHECK(error_of([&] { data::read_mnist((dir / "a-images-idx3-ubyte").string(), Split::kTrain); }) ==
        (dir / "a-images-idx3-ubyte").string() + ": not an MNIST idx images file: magic 0x00000801, expected 0x00000803");
  write_bytes(dir / "a-images-idx3-ubyte", idx_images(3, 2, 2));
  write_bytes(dir / "a-labels-idx1-ubyte", idx_labels(4));
  CHECK(error_of([&] { data::read_mnist((dir / "a-images-idx3-ubyte").string(), Split::kTrain); }) ==
        (dir / "a-images-idx3-ubyte").string() + ": 3 images but " + (dir / "a-labels-idx1-ubyte").string() +
            " has 4 labels");
  write_bytes(dir / "a-images-idx3-ubyte", idx_images(3, 2, 2).substr(0, 20));
  CHECK(contains(error_of([&] { data::read_mnist((dir / "a-images-idx3-ubyte").string(), Split::kTrain); }),
                 "size mismatch: the header announces 12 bytes of data ([3, 2, 2]), the file has 4"));
  write_bytes(dir / "a-images-idx3-ubyte", idx_images(0, 2, 2));
  write_bytes(dir / "a-labels-idx1-ubyte", idx_labels(0));
  CHECK(contains(error_of([&] { data::read_mnist((dir / "a-images-idx3-ubyte").string(), Split::kTrain); }),
                 "empty dataset"));
  test::TempDir empty;
  CHECK(error_of([&] { data::read_mnist(empty.path().string(), Split::kTrain); }) ==
        empty.path().string() + ": no train-images-idx3-ubyte[.gz] in this directory (nor in MNIST/raw/, raw/)");
  write_bytes(dir / "images.bin", "");
  CHECK(contains(error_of([&] { data::read_mnist((dir / "images.bin").string(), Split::kTrain); }),
                 "cannot tell the labels file from this name"));
}

TEST_CASE("CIFAR-10 binary batches: a directory's data_batch_*.bin or test_batch.bin, or one file") {
  test::TempDir dir;
  const auto bin = dir / "cifar-10-batches-bin";
  std::filesystem::create_directories(bin);
  write_bytes(bin / "data_batch_1.bin", cifar_records(3, 0));
  write_bytes(bin / "data_batch_2.bin", cifar_records(2, 3));
  write_bytes(bin / "data_batch_10.bin", cifar_records(1, 5));  // numeric order: after 2
  write_bytes(bin / "test_batch.bin", cifar_records(2, 7));

  config::DataSpec spec;
  spec.format = config::DataFormat::kCifar10;
  spec.train = {"c", dir.path().string()};
  spec.validation = {"c", dir.path().string()};
  const Dataset train = data::load_dataset(spec, Split::kTrain);
  CHECK(train.size() == 6);
  CHECK(at::equal(train.labels(), at::tensor({0, 1, 2, 3, 4, 5}, at::kLong)));
  const data::Batch b = train.get({4});
  CHECK(b.inputs[0].sizes() == at::IntArrayRef({1, 3, 32, 32}));
  // Record 1 of data_batch_2 (first label 3): pixel p = (1 + 3 + p) % 256; channel 1, row 2, col 5.
  const int p = 1024 + 2 * 32 + 5;
  CHECK(b.inputs[0][0][1][2][5].item<float>() == static_cast<float>((4 + p) % 256) / 255.f);
  CHECK(data::load_dataset(spec, Split::kValidation).size() == 2);
  CHECK(data::read_cifar10((bin / "test_batch.bin").string(), Split::kTrain).size() == 2);

  write_bytes(dir / "bad.bin", cifar_records(1, 0) + "xyz");
  CHECK(error_of([&] { data::read_cifar10((dir / "bad.bin").string(), Split::kTrain); }) ==
        (dir / "bad.bin").string() +
            ": size 3076 is not a multiple of 3073 bytes (1 label byte + 3072 pixel bytes per image): not a CIFAR-10 binary batch");
  std::string labelled = cifar_records(2, 0);
  labelled[3073] = 12;
  write_bytes(dir / "label.bin", labelled);
  CHECK(error_of([&] { data::read_cifar10((dir / "label.bin").string(), Split::kTrain); }) ==
        (dir / "label.bin").string() + ": record 2: label 12 is out of range [0, 10)");
  write_bytes(dir / "empty.bin", "");
  CHECK(contains(error_of([&] { data::read_cifar10((dir / "empty.bin").string(), Split::kTrain); }), "empty dataset"));
  test::TempDir none;
  CHECK(contains(error_of([&] { data::read_cifar10(none.path().string(), Split::kTrain); }), "no data_batch_*.bin"));
  CHECK(contains(error_of([&] { data::read_cifar10(none.path().string(), Split::kValidation); }), "no test_batch.bin"));
}

TEST_CASE("dataset_files: every file a reader opens, relative to the job's path") {
  test::TempDir dir;
  std::filesystem::create_directories(dir / "mnist" / "raw");
  write_bytes(dir / "mnist" / "raw" / "train-images-idx3-ubyte", idx_images(3, 2, 2));
  write_bytes(dir / "mnist" / "raw" / "train-labels-idx1-ubyte.gz", idx_labels(3));
  write_bytes(dir / "mnist" / "raw" / "t10k-images-idx3-ubyte", idx_images(2, 2, 2));
  write_bytes(dir / "mnist" / "raw" / "t10k-labels-idx1-ubyte", idx_labels(2));
  config::DataSpec spec;
  spec.format = config::DataFormat::kMnist;
  const std::string mnist = (dir / "mnist").string();
  spec.train = {"mnist", mnist};
  spec.validation = {"mnist", mnist};
  auto train = data::dataset_files(spec, Split::kTrain);
  CHECK(train.root == dir / "mnist");
  CHECK(train.entry.empty());
  CHECK(train.files == std::vector<std::string>{"raw/train-images-idx3-ubyte",
                                                "raw/train-labels-idx1-ubyte.gz"});
  CHECK(data::dataset_files(spec, Split::kValidation).files ==
        std::vector<std::string>{"raw/t10k-images-idx3-ubyte", "raw/t10k-labels-idx1-ubyte"});
  // An images file brings its labels file.
  const std::string images = (dir / "mnist" / "raw" / "train-images-idx3-ubyte").string();
  spec.train = {"images", images};
  train = data::dataset_files(spec, Split::kTrain);
  CHECK(train.root == dir / "mnist" / "raw");
  CHECK(train.entry == "train-images-idx3-ubyte");
  CHECK(train.files ==
        std::vector<std::string>{"train-images-idx3-ubyte", "train-labels-idx1-ubyte.gz"});
  std::filesystem::remove(dir / "mnist" / "raw" / "train-labels-idx1-ubyte.gz");
  CHECK(contains(error_of([&] { data::dataset_files(spec, Split::kTrain); }),
                 "the labels file"));

  // CIFAR-10: the batch files; CSV: the file alone.
  std::filesystem::create_directories(dir / "cifar" / "cifar-10-batches-bin");
  write_bytes(dir / "cifar" / "cifar-10-batches-bin" / "data_batch_1.bin", cifar_records(1, 0));
  write_bytes(dir / "cifar" / "cifar-10-batches-bin" / "data_batch_2.bin", cifar_records(1, 0));
  write_bytes(dir / "cifar" / "cifar-10-batches-bin" / "readme.html", "x");
  spec.format = config::DataFormat::kCifar10;
  spec.train = {"cifar", (dir / "cifar").string()};
  CHECK(data::dataset_files(spec, Split::kTrain).files ==
        std::vector<std::string>{"cifar-10-batches-bin/data_batch_1.bin",
                                 "cifar-10-batches-bin/data_batch_2.bin"});
  write_bytes(dir / "d.csv", kCsv);
  auto csv = data::dataset_files(csv_spec((dir / "d.csv").string()), Split::kTrain);
  CHECK(csv.root == dir.path());
  CHECK(csv.entry == "d.csv");
  CHECK(csv.files == std::vector<std::string>{"d.csv"});
  CHECK(contains(error_of([&] { data::dataset_files(csv_spec(dir.path().string()), Split::kTrain); }),
                 "a directory, where a file is expected"));
}

TEST_CASE("data is read from regular files only: a FIFO or a device is refused at once") {
  // Issue 28: a FIFO as data blocked `ravnest train`; /dev/zero ended in std::bad_alloc.
  test::TempDir dir;
  const std::string fifo = (dir / "pipe.csv").string();
  REQUIRE(::mkfifo(fifo.c_str(), 0600) == 0);
  data::CsvOptions options;
  CHECK(error_of([&] { data::read_csv(fifo, options); }) ==
        fifo + ": is a FIFO, not a regular file");
  CHECK(error_of([&] { data::read_csv("/dev/zero", options); }) ==
        "/dev/zero: is a character device, not a regular file");
  CHECK(error_of([&] { data::read_tensors("/dev/null"); }) ==
        "/dev/null: is a character device, not a regular file");
  config::DataSpec spec;
  spec.format = config::DataFormat::kCsv;
  spec.train = {"pipe.csv", fifo};
  spec.validation = {"/dev/zero", "/dev/zero"};
  CHECK(error_of([&] { data::dataset_files(spec, Split::kTrain); }) ==
        "data.train: " + fifo + " is a FIFO, not a regular file; data is read from regular files "
        "only");
  CHECK(error_of([&] { data::dataset_files(spec, Split::kValidation); }) ==
        "data.validation: /dev/zero is a character device, not a regular file; data is read from "
        "regular files only");
  // A symlink to a regular file is one.
  write_bytes(dir / "d.csv", "a,label\n1,2\n");
  std::filesystem::create_symlink(dir / "d.csv", dir / "link.csv");
  options.label_column = "label";
  CHECK(data::read_csv((dir / "link.csv").string(), options).size() == 1);
}

TEST_CASE("tensors saved by torch.save: tuple, dict, several inputs, and errors") {
  test::TempDir dir;
  const auto script = dir / "save.py";
  test::write_text(script, R"(
import sys, torch
d = sys.argv[1]
x = torch.arange(12, dtype=torch.float32).reshape(4, 3)
y = torch.tensor([0, 1, 0, 1])
torch.save((x, y), d + "/tuple.pt")
torch.save({"inputs": x, "labels": y}, d + "/dict.pt")
torch.save({"inputs": (x, torch.arange(4)), "labels": y.float()}, d + "/two.pt")
torch.save((x, y[:3]), d + "/rows.pt")
torch.save((x, y, y), d + "/three.pt")
torch.save({"inputs": x, "targets": y}, d + "/keys.pt")
torch.save({"inputs": x, "other": y}, d + "/nolabels.pt")
torch.save({"inputs": x}, d + "/onekey.pt")
torch.save(x, d + "/tensor.pt")
torch.save((x, "y"), d + "/strlabels.pt")
torch.save((x[:0], y[:0]), d + "/empty.pt")
torch.save((x, torch.tensor([0, 1, 5, 1])), d + "/range.pt")
torch.save(((x, torch.arange(4)),), d + "/inputs_only.pt")
open(d + "/junk.pt", "w").write("junk")
)");
  const auto run = test::run_command(test::python() + " " + script.string() + " " + dir.path().string());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::string p = dir.path().string();
  for (const char* name : {"tuple.pt", "dict.pt"}) {
    const Dataset d = data::read_tensors(p + "/" + name);
    CHECK(d.size() == 4);
    CHECK(at::equal(d.get({2}).inputs[0], at::tensor({6.f, 7.f, 8.f}).reshape({1, 3})));
    CHECK(at::equal(d.get({1, 3}).labels, at::tensor({1, 1}, at::kLong)));
  }
  const Dataset two = data::read_tensors(p + "/two.pt");
  REQUIRE(two.get({1}).inputs.size() == 2);
  CHECK(two.get({1}).inputs[1].item<int64_t>() == 1);
  CHECK(two.labels().scalar_type() == at::kFloat);

  CHECK(error_of([&] { data::read_tensors(p + "/rows.pt"); }) == p + "/rows.pt: the inputs have 4 rows but there are 3 labels");
  CHECK(error_of([&] { data::read_tensors(p + "/three.pt"); }) == p + "/three.pt: holds a tuple of 3 items, expected (inputs, labels)");
  CHECK(contains(error_of([&] { data::read_tensors(p + "/keys.pt"); }), "unexpected key \"targets\""));
  CHECK(contains(error_of([&] { data::read_tensors(p + "/nolabels.pt"); }), "unexpected key \"other\""));
  // LibTorch's unpickler lacks the opcode of a one-element dict: the message says so.
  CHECK(contains(error_of([&] { data::read_tensors(p + "/onekey.pt"); }), "cannot unpickle one-element lists or dicts"));
  CHECK(contains(error_of([&] { data::read_tensors(p + "/tensor.pt"); }), p + "/tensor.pt: holds a Tensor, expected a tuple"));
  CHECK(contains(error_of([&] { data::read_tensors(p + "/strlabels.pt"); }), "the labels are a String, expected a tensor"));
  CHECK(error_of([&] { data::read_tensors(p + "/empty.pt"); }) == p + "/empty.pt: empty dataset (no samples)");
  CHECK(contains(error_of([&] { data::read_tensors(p + "/junk.pt"); }), p + "/junk.pt: not a file saved with torch.save"));
  config::DataSpec spec;
  spec.format = config::DataFormat::kTensors;
  spec.train = {"range.pt", p + "/range.pt"};
  spec.num_classes = 3;
  CHECK(error_of([&] { data::load_dataset(spec, Split::kTrain); }) == p + "/range.pt: sample 3: label 5 is out of range [0, 3)");

  // To predict on (labels optional): the inputs alone, as a tensor or a tuple (inputs,).
  const Dataset bare = data::read_tensors(p + "/tensor.pt", /*labels_optional=*/true);
  CHECK(bare.size() == 4);
  CHECK(at::equal(bare.get({2}).inputs[0], at::tensor({6.f, 7.f, 8.f}).reshape({1, 3})));
  const Dataset only = data::read_tensors(p + "/inputs_only.pt", true);
  CHECK(only.size() == 4);
  CHECK(only.get({1}).inputs.size() == 2);
  CHECK(at::equal(data::read_tensors(p + "/tuple.pt", true).labels(), at::tensor({0, 1, 0, 1}, at::kLong)));
  CHECK(contains(error_of([&] { data::read_tensors(p + "/three.pt", true); }), "expected (inputs, labels)"));
  spec.train = {"tensor.pt", p + "/tensor.pt"};
  CHECK(data::load_dataset(spec, Split::kTrain, data::Labels::kOptional).size() == 4);
  CHECK(contains(error_of([&] { data::load_dataset(spec, Split::kTrain); }), "holds a Tensor"));
}

TEST_CASE("CSV to predict on: without the label column, by name or by input_shape") {
  test::TempDir dir;
  write_bytes(dir / "named.csv", "a,b,c\n1,2,3\n4,5,6\n");
  write_bytes(dir / "plain.csv", "1,2,3\n4,5,6\n");
  data::CsvOptions options;
  options.label_column = "label";
  options.labels_optional = true;
  Dataset d = data::read_csv((dir / "named.csv").string(), options);
  CHECK(d.size() == 2);
  CHECK(at::equal(d.raw_inputs()[0], at::tensor({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}).reshape({2, 3})));
  options.labels_optional = false;
  CHECK(contains(error_of([&] { data::read_csv((dir / "named.csv").string(), options); }),
                 "no column named 'label'"));
  // By index: every column a feature of input_shape means no label column.
  options = {};
  options.header = false;
  options.input_shape = {3};
  options.labels_optional = true;
  d = data::read_csv((dir / "plain.csv").string(), options);
  CHECK(d.size() == 2);
  CHECK(d.raw_inputs()[0].sizes() == at::IntArrayRef({2, 3}));
  options.input_shape = {2};  // two features and the label, as for training
  d = data::read_csv((dir / "plain.csv").string(), options);
  CHECK(at::equal(d.labels(), at::tensor({3, 6}, at::kLong)));
}

TEST_CASE("BatchOrder: reproducible, per-epoch permutations, partial last batch, drop_last") {
  BatchOrder a(10, 4, 7, true, false), b(10, 4, 7, true, false), c(10, 4, 8, true, false);
  CHECK(a.batches_per_epoch() == 3);
  CHECK(a.epoch(0) == b.epoch(0));
  CHECK(a.epoch(3) == b.epoch(3));
  CHECK(a.epoch(0) != a.epoch(1));
  CHECK(a.epoch(0) != c.epoch(0));
  auto batches = a.epoch(2);
  REQUIRE(batches.size() == 3);
  CHECK(batches[0].size() == 4);
  CHECK(batches[2].size() == 2);
  std::vector<int64_t> all;
  for (const auto& batch : batches) all.insert(all.end(), batch.begin(), batch.end());
  std::sort(all.begin(), all.end());
  for (int64_t i = 0; i < 10; ++i) CHECK(all[static_cast<size_t>(i)] == i);

  BatchOrder plain(5, 2, 1, false, true);
  CHECK(plain.batches_per_epoch() == 2);
  CHECK(plain.epoch(4) == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  CHECK_THROWS_AS(BatchOrder(3, 4, 0, true, true), std::invalid_argument);
  // Issue 28's probe: batch_size = 2^63 - 1 overflowed the count and blamed drop_last. It is one
  // batch of the whole dataset, as in PyTorch's DataLoader.
  const int64_t huge = std::numeric_limits<int64_t>::max();
  BatchOrder whole(5, huge, 1, false, false);
  CHECK(whole.batches_per_epoch() == 1);
  CHECK(whole.epoch(0) == std::vector<std::vector<int64_t>>{{0, 1, 2, 3, 4}});
  CHECK_THROWS_WITH(BatchOrder(5, huge, 1, false, true), Catch::Contains("drop_last leaves no batch"));
  CHECK_THROWS_AS(BatchOrder(0, 4, 0, true, false), std::invalid_argument);
  CHECK_THROWS_AS(BatchOrder(3, 0, 0, true, false), std::invalid_argument);
  CHECK(BatchOrder::epoch_seed(0, 0) != BatchOrder::epoch_seed(1, 0));
  CHECK(BatchOrder::epoch_seed(0, 1) != BatchOrder::epoch_seed(1, 0));
  CHECK(BatchOrder::epoch_seed(-5, 3) < (uint64_t(1) << 63));
}

TEST_CASE("BatchOrder equals Python's torch.randperm with the documented seed") {
  test::TempDir dir;
  const auto script = dir / "perm.py";
  test::write_text(script, R"(
import sys, torch
M = (1 << 64) - 1
def epoch_seed(seed, epoch):
    z = (seed + (epoch + 1) * 0x9E3779B97F4A7C15) & M
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
    return (z ^ (z >> 31)) >> 1
for seed, epoch, n in [(0, 0, 10), (42, 3, 100), (123456789, 0, 1437), (7, 11, 5000)]:
    g = torch.Generator(); g.manual_seed(epoch_seed(seed, epoch))
    print(seed, epoch, n, epoch_seed(seed, epoch), " ".join(map(str, torch.randperm(n, generator=g).tolist())))
)");
  const auto run = test::run_command(test::python() + " " + script.string());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  std::istringstream lines(run.out);
  std::string line;
  int checked = 0;
  while (std::getline(lines, line)) {
    std::istringstream in(line);
    int64_t seed, epoch, n;
    uint64_t python_seed;
    in >> seed >> epoch >> n >> python_seed;
    CHECK(BatchOrder::epoch_seed(seed, epoch) == python_seed);
    std::vector<int64_t> expected(static_cast<size_t>(n));
    for (auto& v : expected) in >> v;
    CHECK(BatchOrder(n, 7, seed, true, false).epoch_order(epoch) == expected);
    ++checked;
  }
  CHECK(checked == 4);
}

TEST_CASE("micro-batches: contiguous, sizes differ by at most one, like torch.tensor_split") {
  using Ranges = std::vector<std::pair<int64_t, int64_t>>;
  CHECK(data::split_micro_batches(10, 4) == Ranges{{0, 3}, {3, 6}, {6, 8}, {8, 10}});
  CHECK(data::split_micro_batches(8, 4) == Ranges{{0, 2}, {2, 4}, {4, 6}, {6, 8}});
  CHECK(data::split_micro_batches(3, 5) == Ranges{{0, 1}, {1, 2}, {2, 3}});
  CHECK(data::split_micro_batches(7, 1) == Ranges{{0, 7}});
  CHECK(data::split_micro_batches(0, 3).empty());
  CHECK_THROWS(data::split_micro_batches(4, 0));
  for (int64_t n = 1; n <= 70; ++n) {
    for (int m = 1; m <= 9; ++m) {
      const auto parts = data::split_micro_batches(n, m);
      REQUIRE(static_cast<int64_t>(parts.size()) == std::min<int64_t>(n, m));
      // Equal to at::tensor_split's pieces.
      const auto pieces = at::arange(n).tensor_split(std::min<int64_t>(n, m));
      int64_t start = 0;
      for (size_t i = 0; i < parts.size(); ++i) {
        CHECK(parts[i].first == start);
        CHECK(parts[i].second - parts[i].first == pieces[i].size(0));
        start = parts[i].second;
      }
      CHECK(start == n);
    }
  }
}

TEST_CASE("data.order: each epoch's order from a torch.save file, checked; a cluster's part") {
  test::TempDir dir;
  const auto script = dir / "orders.py";
  test::write_text(script, R"(
import sys, torch
d = sys.argv[1]
torch.save(torch.tensor([[3, 1, 4, 0, 2], [0, 1, 2, 3, 4]]), d + "/tensor.pt")
torch.save([torch.tensor([4, 3, 2, 1, 0]), torch.tensor([1, 0, 3, 2, 4], dtype=torch.int32)], d + "/list.pt")
torch.save(torch.tensor([[3, 1, 4, 0]]), d + "/short.pt")
torch.save(torch.tensor([[3, 1, 5, 0, 2]]), d + "/range.pt")
torch.save(torch.tensor([[3, 1, 3, 0, 2]]), d + "/repeat.pt")
torch.save(torch.tensor([[3., 1, 4, 0, 2]]), d + "/float.pt")
torch.save(torch.zeros(2, 5, 1, dtype=torch.int64), d + "/rank3.pt")
torch.save("order", d + "/string.pt")
)");
  const auto run = test::run_command(test::python() + " " + script.string() + " " + dir.path().string());
  INFO(run.err);
  REQUIRE(run.exit_code == 0);
  const std::string p = dir.path().string();
  const auto tensor = data::read_epoch_orders(p + "/tensor.pt", 5, 2);
  CHECK(tensor == std::vector<std::vector<int64_t>>{{3, 1, 4, 0, 2}, {0, 1, 2, 3, 4}});
  const auto list = data::read_epoch_orders(p + "/list.pt", 5, 1);  // more rows than epochs: kept
  CHECK(list == std::vector<std::vector<int64_t>>{{4, 3, 2, 1, 0}, {1, 0, 3, 2, 4}});

  // The batches are the rows cut in batch_size, epoch by epoch; drop_last drops each row's tail.
  data::BatchOrder order(tensor, 2, /*drop_last=*/true);
  CHECK(order.batches_per_epoch() == 2);
  CHECK(order.epoch(0) == std::vector<std::vector<int64_t>>{{3, 1}, {4, 0}});
  CHECK(order.epoch(1) == std::vector<std::vector<int64_t>>{{0, 1}, {2, 3}});
  CHECK_THROWS_AS(order.epoch(2), std::out_of_range);
  // Two clusters: the contiguous halves of each epoch's order, the remainder left out.
  CHECK(data::cluster_part(tensor, 2, 1) == std::vector<std::vector<int64_t>>{{4, 0}, {2, 3}});
  CHECK(data::cluster_part(tensor, 2, 0) == std::vector<std::vector<int64_t>>{{3, 1}, {0, 1}});

  const std::string o = "data.order: " + p;
  CHECK(error_of([&] { data::read_epoch_orders(p + "/tensor.pt", 5, 3); }) ==
        o + "/tensor.pt: holds 2 epoch orders, the job trains 3 epochs");
  CHECK(error_of([&] { data::read_epoch_orders(p + "/tensor.pt", 6, 1); }) ==
        o + "/tensor.pt: epoch 0 orders 5 samples, the training data has 6 (each epoch must "
            "order every sample once)");
  CHECK(error_of([&] { data::read_epoch_orders(p + "/short.pt", 5, 1); }) ==
        o + "/short.pt: epoch 0 orders 4 samples, the training data has 5 (each epoch must "
            "order every sample once)");
  CHECK(error_of([&] { data::read_epoch_orders(p + "/range.pt", 5, 1); }) ==
        o + "/range.pt: epoch 0, position 2: index 5 is out of range [0, 5)");
  CHECK(error_of([&] { data::read_epoch_orders(p + "/repeat.pt", 5, 1); }) ==
        o + "/repeat.pt: epoch 0, position 2: index 3 is repeated (each epoch orders every "
            "sample once)");
  CHECK(contains(error_of([&] { data::read_epoch_orders(p + "/float.pt", 5, 1); }),
                 o + "/float.pt: epoch 0: indices of dtype Float, expected an integer tensor"));
  CHECK(contains(error_of([&] { data::read_epoch_orders(p + "/rank3.pt", 5, 1); }),
                 o + "/rank3.pt: holds a tensor [2, 5, 1], expected [epochs, n]"));
  CHECK(error_of([&] { data::read_epoch_orders(p + "/string.pt", 5, 1); }) ==
        o + "/string.pt: holds a String, expected a tensor or a list of tensors");
}
