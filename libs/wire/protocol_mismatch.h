// A client and a daemon that disagree on --insecure (docs/security.md#--insecure). Without this,
// a plain client met a TLS daemon as "Peer disconnected", and a TLS client a plain daemon as a
// failed handshake: neither said what to change.
//
// The daemon reads the first byte a connection sends (replay_stream.h hands it on): a TLS
// client's first record is a handshake (0x16); a plain client's first message is a Cap'n Proto
// frame, whose first byte (segments - 1, little-endian) is 0 for every message ravnest sends
// first. On a mismatch the daemon answers in the client's own protocol, so that the client can
// say it in one line, logs one refusal and closes:
// - a TLS daemon sends a plain client a Cap'n Proto RPC Abort whose reason is kDaemonSpeaksTls;
//   the client's RPC system fails every call with it;
// - a plain daemon sends a TLS client a fatal TLS alert (protocol_version), which the client's
//   OpenSSL reports as "tlsv1 alert protocol version" and tls_refusal() turns into
//   kDaemonSpeaksPlain.
#pragma once

#include <cstdint>
#include <string>

#include <kj/array.h>

namespace ravnest::wire {

inline constexpr const char* kDaemonSpeaksTls =
    "refused: the daemon speaks TLS; drop --insecure (both ends must agree)";
inline constexpr const char* kDaemonSpeaksPlain =
    "refused: the daemon speaks plain TCP (ravnestd --insecure); give --insecure too, or "
    "restart it without";

// Whether a connection's first byte starts a TLS handshake record.
inline bool starts_tls(uint8_t first_byte) { return first_byte == 0x16; }

// A Cap'n Proto RPC message Abort(FAILED, reason), framed as a plain connection carries it.
kj::Array<kj::byte> plain_abort_message(const std::string& reason);

// A fatal TLS alert record, protocol_version (70): what a TLS client hears from a plain daemon.
kj::Array<kj::byte> tls_protocol_version_alert();

}  // namespace ravnest::wire
