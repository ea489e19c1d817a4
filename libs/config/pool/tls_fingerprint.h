// A TLS certificate's fingerprint, as a pool file pins it (docs/security.md, "Pinned
// certificates"): the SHA-256 of the certificate's DER bytes.
//
// Written by hand or pasted from `openssl x509 -noout -fingerprint -sha256 -in node.crt`, so any of
//   "3f9a...c1" (64 hex digits), "3F:9A:...:C1", "sha256:3f9a...", "SHA256 Fingerprint=3F:9A:..."
// is accepted; the canonical form is 64 lowercase hex digits without separators.
#pragma once

#include <optional>
#include <string>
#include <string_view>

namespace ravnest::config {

// The canonical form of `text`, or nothing when it is not a SHA-256 fingerprint.
std::optional<std::string> canonical_fingerprint(std::string_view text);

}  // namespace ravnest::config
