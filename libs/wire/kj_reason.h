// The reason a KJ exception gives, as one line for a user: without the "remote exception: "
// that a call across the wire adds, without the failed system call's signature
// ("::read(fd, buffer, maxBytes): Connection reset by peer" -> "Connection reset by peer"), and
// without the "; name = value" details that KJ_REQUIRE and KJ_SYSCALL append. An OpenSSL error
// mid-connection gives its reason ("TLS: decryption failed or bad record mac"), and a record that
// failed its authentication says what that means: bytes altered on the way (docs/relay.md).
#pragma once

#include <string>

#include <kj/exception.h>

namespace ravnest::wire {

std::string kj_reason(const kj::Exception& e);
std::string kj_reason(const std::string& description);  // the same, from a description

// OpenSSL's reason in a description that holds "OpenSSL error": the end of its last error line
// ("error:0A000086:SSL routines::certificate verify failed" -> "certificate verify failed");
// empty when there is none.
std::string openssl_reason(const std::string& description);

// A KJ exception whose description is `description` alone (KJ_EXCEPTION with a variable would
// add "name = "), for reasons written for users.
kj::Exception kj_failure(const std::string& description,
                         kj::Exception::Type type = kj::Exception::Type::FAILED);

}  // namespace ravnest::wire
