// What the fuzz targets of RPC messages share: the input as the words of a message, the bounded
// ReaderOptions they read it with, and the input of the targets whose first byte chooses the
// message.
#pragma once

#include <capnp/common.h>
#include <capnp/message.h>
#include <capnp/serialize.h>
#include <kj/array.h>
#include <kj/exception.h>

#include <cstdint>
#include <cstring>

namespace ravnest::fuzz {

// Word-aligned, as a connection's buffer is; a tail shorter than a word cannot be a message's.
inline kj::Array<capnp::word> words_of(const uint8_t* data, size_t size) {
  kj::Array<capnp::word> words = kj::heapArray<capnp::word>(size / sizeof(capnp::word));
  if (words.size() > 0) std::memcpy(words.begin(), data, words.size() * sizeof(capnp::word));
  return words;
}

// 8 MiB of traversal (no seed comes near it) and capnp's default nesting limit.
inline capnp::ReaderOptions reader_options() {
  capnp::ReaderOptions options;
  options.traversalLimitInWords = uint64_t{1} << 20;
  options.nestingLimit = 64;
  return options;
}

// Calls decode(first byte, message) with the rest of the input read as a message, as a
// connection reads it. capnp's refusal (kj::Exception: structure, bounds, limits) is the
// connection's error, not a finding; any other exception reaches the caller.
template <typename Decode>
void decode_after_first_byte(const uint8_t* data, size_t size, Decode&& decode) {
  if (size < 1) return;
  const kj::Array<capnp::word> words = words_of(data + 1, size - 1);
  try {
    capnp::FlatArrayMessageReader message(words, reader_options());
    decode(data[0], static_cast<capnp::MessageReader&>(message));
  } catch (const kj::Exception&) {
  }
}

}  // namespace ravnest::fuzz
