// SHA-256 (libs/base/sha256.h): known vectors, and the incremental Sha256 against the one-shot.
#include <catch2/catch.hpp>

#include <random>
#include <stdexcept>
#include <string>

#include "libs/base/sha256.h"

using ravnest::base::Sha256;
using ravnest::base::sha256_hex;
using ravnest::base::same_sha256;

TEST_CASE("sha256 of the FIPS 180 test vectors", "[sha256]") {
  CHECK(sha256_hex("") == "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  CHECK(sha256_hex("abc") == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(sha256_hex("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq") ==
        "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  CHECK(sha256_hex(std::string(1000000, 'a')) ==
        "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST_CASE("incremental sha256 equals the one-shot for every split", "[sha256]") {
  std::mt19937 rng(7);
  for (size_t len : {0, 1, 55, 56, 63, 64, 65, 119, 120, 128, 200, 1000}) {
    std::string data(len, '\0');
    for (char& c : data) c = static_cast<char>(rng());
    const std::string expected = sha256_hex(data);
    for (size_t split = 0; split <= len; ++split) {
      Sha256 h;
      h.update(data.substr(0, split));
      h.update(data.data() + split, 0);
      h.update(data.substr(split));
      INFO("len " << len << " split " << split);
      REQUIRE(h.hex() == expected);
      REQUIRE(h.size() == len);
    }
    // Many small random pieces.
    Sha256 h;
    for (size_t at = 0; at < len;) {
      size_t n = std::min<size_t>(len - at, rng() % 70);
      h.update(data.data() + at, n);
      at += n;
    }
    CHECK(h.hex() == expected);
  }
}

TEST_CASE("Sha256::hex finishes the hash", "[sha256]") {
  Sha256 h;
  h.update("abc");
  CHECK(h.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK(h.hex() == "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  CHECK_THROWS_AS(h.update("d"), std::logic_error);
}

TEST_CASE("same_sha256 compares hex digits without their case", "[sha256]") {
  const std::string lower = "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad";
  CHECK(same_sha256(lower, "BA7816BF8F01CFEA414140DE5DAE2223B00361A396177A9CB410FF61F20015AD"));
  CHECK(same_sha256(lower, lower));
  CHECK_FALSE(same_sha256(lower, lower.substr(1)));
  CHECK_FALSE(same_sha256(lower, "ca7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"));
}
