// What the fuzz targets of RPC messages share: the input as the words of a message, and the
// bounded ReaderOptions they read it with.
#pragma once

#include <capnp/common.h>
#include <capnp/message.h>
#include <kj/array.h>

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

}  // namespace ravnest::fuzz
