// libs/exported's writer: every zoo archive read, written and read again runs as eager PyTorch
// did (forward, backward, eval; bit for bit), keeps its tied weights tied and its tensors' layout,
// and loads in PyTorch itself (torch.export.load(path).module(), the venv's Python) giving
// eager's outputs. Then what the writer refuses, in one line, leaving no file.
#include <filesystem>

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include "libs/base/config_error.h"
#include "libs/exported/exported_module.h"
#include "libs/exported/pt2_archive.h"
#include "libs/exported/pt2_writer.h"
#include "tests/exported/zoo_reference.h"
#include "tests/support/test_env.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace ravnest;
using exported::ExportedModule;
using exported::Pt2Archive;

namespace {

void check_same_tensors(const std::map<std::string, at::Tensor>& read,
                        const std::map<std::string, at::Tensor>& original, const std::string& what) {
  REQUIRE(read.size() == original.size());
  for (const auto& [name, t] : original) {
    INFO(what << " " << name);
    REQUIRE(read.count(name));
    const at::Tensor& back = read.at(name);
    CHECK(back.sizes() == t.sizes());
    CHECK(back.strides() == t.strides());
    CHECK(back.requires_grad() == t.requires_grad());
    test::check_equal(back.detach(), t.detach(), what + " " + name);
  }
}

}  // namespace

TEST_CASE("pt2 writer: every zoo archive read, written and read again runs as eager") {
  test::TempDir dir;
  for (const std::string& name : test::zoo_models()) {
    INFO("model " << name);
    const Pt2Archive original = exported::read_pt2_archive(test::zoo(name + ".pt2"));
    const std::string path = (dir / (name + ".pt2")).string();
    exported::write_pt2_archive(original, path);
    const Pt2Archive back = exported::read_pt2_archive(path);
    CHECK(back.model_name == original.model_name);
    CHECK(back.model_json == original.model_json);
    check_same_tensors(back.weights, original.weights, "weight");
    check_same_tensors(back.constants, original.constants, "constant");
    // The bytes in memory are the file's.
    CHECK(exported::read_pt2_archive_bytes(exported::write_pt2_archive_bytes(original), name)
              .weights.size() == original.weights.size());
    ExportedModule module = ExportedModule::from_archive(back);
    test::check_against_eager(name, test::under_test(module));
  }
}

TEST_CASE("pt2 writer: tied weights are written once and read back as one tensor") {
  test::TempDir dir;
  const Pt2Archive original = exported::read_pt2_archive(test::zoo("tied.pt2"));
  const std::string path = (dir / "tied.pt2").string();
  exported::write_pt2_archive(original, path);
  const Pt2Archive back = exported::read_pt2_archive(path);
  CHECK(back.weights.at("emb.weight").is_same(back.weights.at("out.weight")));
  // Three files for four names: emb.weight and out.weight share one.
  caffe2::serialize::PyTorchStreamReader reader(path);
  CHECK(reader.hasRecord("data/weights/weight_2"));
  CHECK_FALSE(reader.hasRecord("data/weights/weight_3"));
  CHECK(back.weights.size() == 4);
}

TEST_CASE("pt2 writer: views of one storage share its span; device tensors go to the host") {
  Pt2Archive archive = exported::read_pt2_archive(test::zoo("constants.pt2"));
  // The constant `offset` as a strided view into the middle of a larger storage, and `scale` a
  // view of the same storage: one file holding the span both reach, offsets rebased.
  const at::Tensor storage = at::arange(20, at::kFloat);
  archive.constants["offset"] = storage.as_strided({4}, {2}, 5);
  archive.constants["scale"] = storage.as_strided({4}, {1}, 8);
  const Pt2Archive back =
      exported::read_pt2_archive_bytes(exported::write_pt2_archive_bytes(archive), "views");
  check_same_tensors(back.constants, archive.constants, "constant");
  CHECK(back.constants.at("offset").storage().nbytes() == (12 - 5) * sizeof(float));
  CHECK(back.constants.at("offset").storage().is_alias_of(back.constants.at("scale").storage()));
}

TEST_CASE("pt2 writer: the written archives load in PyTorch and give eager's outputs") {
  const std::string out = (std::filesystem::path(test::binary_dir()) / "pt2_written").string();
  std::filesystem::remove_all(out);  // what an earlier run wrote is not checked again
  std::filesystem::create_directories(out);
  for (const std::string& name : test::zoo_models()) {
    exported::write_pt2_archive(exported::read_pt2_archive(test::zoo(name + ".pt2")),
                                out + "/" + name + ".pt2");
  }
  const test::CommandResult run = test::run_command(
      test::python() + " " + test::source_dir() + "/tests/exported/check_pt2_in_python.py --archives " +
          out + " --references " + test::zoo(""),
      600);
  INFO(run.out << run.err);
  CHECK(run.exit_code == 0);
  CHECK(run.out.find("checked " + std::to_string(test::zoo_models().size()) + " archives") !=
        std::string::npos);
}

TEST_CASE("pt2 writer: an archive it cannot write is refused in one line, leaving no file") {
  test::TempDir dir;
  const std::string path = (dir / "bad.pt2").string();
  Pt2Archive archive = exported::read_pt2_archive(test::zoo("cnn.pt2"));
  auto refusal = [&](const Pt2Archive& a) {
    try {
      exported::write_pt2_archive(a, path);
    } catch (const base::ConfigError& e) {
      const std::string what = e.what();
      CHECK(what.find('\n') == std::string::npos);
      CHECK(what.rfind(path, 0) == 0);
      CHECK_FALSE(std::filesystem::exists(path));
      return what;
    }
    FAIL("wrote " << path);
    return std::string();
  };
  SECTION("a program text that does not parse") {
    archive.model_json = "{";
    CHECK(refusal(archive).find("(models/model.json)") != std::string::npos);
  }
  SECTION("no model name") {
    archive.model_name = "";
    CHECK(refusal(archive).find("model name ''") != std::string::npos);
  }
  SECTION("a sparse weight") {
    archive.weights["fc.bias"] = archive.weights["fc.bias"].detach().to_sparse();
    CHECK(refusal(archive).find("weight 'fc.bias' is not a dense tensor") != std::string::npos);
  }
  SECTION("a directory that does not exist") {
    CHECK_THROWS_WITH(exported::write_pt2_archive(archive, (dir / "no" / "x.pt2").string()),
                      Catch::Contains((dir / "no" / "x.pt2").string()));
  }
}
