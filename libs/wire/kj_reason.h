// The reason a KJ exception gives, as one line for a user: without the "remote exception: "
// that a call across the wire adds, without the failed system call's signature
// ("::read(fd, buffer, maxBytes): Connection reset by peer" -> "Connection reset by peer"), and
// without the "; name = value" details that KJ_REQUIRE and KJ_SYSCALL append.
#pragma once

#include <string>

#include <kj/exception.h>

namespace ravnest::wire {

std::string kj_reason(const kj::Exception& e);
std::string kj_reason(const std::string& description);  // the same, from a description

// A KJ exception whose description is `description` alone (KJ_EXCEPTION with a variable would
// add "name = "), for reasons written for users.
kj::Exception kj_failure(const std::string& description,
                         kj::Exception::Type type = kj::Exception::Type::FAILED);

}  // namespace ravnest::wire
