// The LibTorch 1.13 build refuses a torch.export archive in one line naming its LibTorch and the
// 2.x build, before opening the file.
#include <catch2/catch.hpp>

#include "libs/base/config_error.h"
#include "libs/exported/exported_module.h"

using ravnest::exported::ExportedModule;

TEST_CASE("exported: the 1.13 build refuses a .pt2 in one line naming its LibTorch and the 2.x build") {
  try {
    ExportedModule::load("model.pt2");
    FAIL("accepted");
  } catch (const ravnest::base::ConfigError& e) {
    const std::string what = e.what();
    CHECK(what.find('\n') == std::string::npos);
    CHECK(what.find("model.pt2: ") == 0);
    CHECK(what.find("LibTorch 2.x (scripts/build --torch2)") != std::string::npos);
    CHECK(what.find("LibTorch 1.13") != std::string::npos);
  }
}
