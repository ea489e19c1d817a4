// load_stage tells a stage file's format from its content, not its name: a TorchScript module
// loads as a TorchScriptStage, a torch.export archive as an ExportedStage (refused in one line on
// LibTorch 1.13, naming the 2.x build), anything else is refused in one line naming the file.
#include <caffe2/serialize/inline_container.h>
#include <torch/script.h>

#include "libs/stage/stage_file.h"
#include "libs/stage/torchscript_stage.h"
#include "libs/torch_support/torch_compat.h"
#include "tests/support/test_env.h"

#undef CHECK
#include <catch2/catch.hpp>

using namespace ravnest;
using stage::StageFormat;

namespace {

void write_zip(const std::string& path, const std::map<std::string, std::string>& records) {
  caffe2::serialize::PyTorchStreamWriter writer(path);
  for (const auto& [name, bytes] : records) writer.writeRecord(name, bytes.data(), bytes.size());
  writer.writeEndOfFile();
}

std::string refusal(const std::string& path) {
  try {
    stage::load_stage(path);
  } catch (const std::runtime_error& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.rfind(path, 0) == 0);
    return what;
  }
  FAIL("loaded " << path);
  return "";
}

}  // namespace

TEST_CASE("stage file: the format a zip's records say") {
  CHECK(stage::stage_format_of_records({"data.pkl", "constants.pkl", "code/__torch__.py", "version"}) ==
        StageFormat::kTorchScript);
  CHECK(stage::stage_format_of_records({"models/model.json", "data/weights/weight_0", "archive_format"}) ==
        StageFormat::kExported);
  CHECK(stage::stage_format_of_records({"data.pkl", "version"}) == StageFormat::kUnknown);
  CHECK(stage::stage_format_of_records({"models/.json", "models/a/b.json"}) == StageFormat::kUnknown);
  CHECK(stage::stage_format_of_records({}) == StageFormat::kUnknown);
}

TEST_CASE("stage file: a TorchScript module loads as a TorchScriptStage, whatever its name") {
  test::TempDir dir;
  torch::jit::Module module("Scale");
  module.register_parameter("weight", torch::full({3}, 2.0), false);
  module.define("def forward(self, x):\n  return x * self.weight\n");
  for (const std::string name : {"model.pt", "named_like_an_export.pt2"}) {
    const std::string path = (dir / name).string();
    module.save(path);
    CHECK(stage::stage_format_of(path) == StageFormat::kTorchScript);
    const std::shared_ptr<stage::Stage> loaded = stage::load_stage(path, c10::Device("cpu"));
    CHECK(loaded->format() == "TorchScript");
    CHECK(stage::torchscript_module(*loaded) != nullptr);
    CHECK(at::equal(loaded->forward({torch::ones({3})}).toTensor(), torch::full({3}, 2.0)));
  }
}

TEST_CASE("stage file: a text file and a zip of neither format are refused in one line") {
  test::TempDir dir;
  const std::string text = (dir / "model.pt").string();
  test::write_text(text, "def forward(x): return x\n");
  CHECK(refusal(text).find("neither a TorchScript model nor a torch.export archive (.pt2): not a zip") !=
        std::string::npos);
  const std::string zip = (dir / "weights.pt").string();
  write_zip(zip, {{"data.pkl", "x"}, {"data/0", "y"}});
  CHECK(refusal(zip).find("no data.pkl and code/ (torch.jit.save) nor models/<name>.json") !=
        std::string::npos);
  CHECK(refusal((dir / "missing.pt").string()).find("neither a TorchScript model") != std::string::npos);
}

TEST_CASE("stage file: a torch.export archive goes to the exported stage's loader") {
  test::TempDir dir;
  const std::string path = (dir / "stage.pt2").string();
  write_zip(path, {{"models/model.json", "{\"graph_module\": ["}, {"archive_format", "pt2"}});
  CHECK(stage::stage_format_of(path) == StageFormat::kExported);
  const std::string what = refusal(path);
  if (torch_support::kTorchMajor < 2) {
    CHECK(what.find("needs ravnest built against LibTorch 2.x (scripts/build --torch2)") != std::string::npos);
  } else {
    CHECK(what.find("(models/model.json)") != std::string::npos);  // the exported reader's refusal
  }
}
