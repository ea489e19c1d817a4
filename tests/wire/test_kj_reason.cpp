// kj_reason: what users read of a KJ exception.
#include <catch2/catch.hpp>

#include <kj/debug.h>

#include "libs/wire/kj_reason.h"

using ravnest::wire::kj_reason;

TEST_CASE("kj_reason keeps the reason and drops KJ's decorations", "[wire][errors]") {
  CHECK(kj_reason("remote exception: std::exception: busy: a job is running") ==
        "busy: a job is running");
  CHECK(kj_reason("::read(fd, buffer, maxBytes): Connection reset by peer") ==
        "Connection reset by peer");
  CHECK(kj_reason("connect(): Connection refused") == "Connection refused");
  CHECK(kj_reason("::bind(sockfd, addr, addrlen): Address already in use; toString() = 1.2.3.4") ==
        "Address already in use");
  CHECK(kj_reason("cannot resolve address; host = nowhere; port = 8080") ==
        "cannot resolve address");
  CHECK(kj_reason("a: b; c") == "a: b; c");  // a semicolon of the message itself stays
  CHECK(kj_reason("two\nlines") == "two lines");
  const std::string path = "/x/y";
  try {
    KJ_FAIL_REQUIRE("file ByteSink: size mismatch", path.c_str());
  } catch (const kj::Exception& e) {
    CHECK(kj_reason(e) == "file ByteSink: size mismatch");
  }
}

TEST_CASE("kj_reason gives OpenSSL's reason, and says what a failed record means", "[wire][errors]") {
  CHECK(kj_reason("OpenSSL error; message = error:0A000119:SSL routines::decryption failed or "
                  "bad record mac") ==
        "TLS: decryption failed or bad record mac (a record altered on the way: the connection "
        "is dropped)");
  CHECK(kj_reason("OpenSSL error; message = error:0A000086:SSL routines::certificate verify "
                  "failed") == "TLS: certificate verify failed");
  CHECK(ravnest::wire::openssl_reason("Connection reset by peer").empty());
}
