#include "libs/daemon/node_secret.h"

#include <string_view>

#include <kj/debug.h>
#include <spdlog/spdlog.h>

#include "libs/config/secret.h"

namespace ravnest::runtime {

void NodeSecret::check(capnp::Data::Reader given, const char* method) const {
  std::string_view text(reinterpret_cast<const char*>(given.begin()), given.size());
  if (!config::secrets_equal(text, secret_)) {
    spdlog::warn("refused {}: wrong or missing shared secret", method);
    kj::throwFatalException(KJ_EXCEPTION(FAILED, "unauthorized: wrong or missing shared secret"));
  }
}

}  // namespace ravnest::runtime
