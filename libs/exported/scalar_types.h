// The codes torch/_export/serde/schema.py gives dtypes, memory formats and layouts, as LibTorch's
// enums (the two number them differently), and a dtype's code back. Header only; throws
// base::ConfigError for a code this LibTorch has no enum for (or a dtype schema.py has no code for).
#pragma once

#include <string>

#include <c10/core/Layout.h>
#include <c10/core/MemoryFormat.h>
#include <c10/core/ScalarType.h>

#include "libs/base/config_error.h"

namespace ravnest::exported {

inline c10::ScalarType to_scalar_type(int code) {
  switch (code) {
    case 1: return c10::ScalarType::Byte;
    case 2: return c10::ScalarType::Char;
    case 3: return c10::ScalarType::Short;
    case 4: return c10::ScalarType::Int;
    case 5: return c10::ScalarType::Long;
    case 6: return c10::ScalarType::Half;
    case 7: return c10::ScalarType::Float;
    case 8: return c10::ScalarType::Double;
    case 9: return c10::ScalarType::ComplexHalf;
    case 10: return c10::ScalarType::ComplexFloat;
    case 11: return c10::ScalarType::ComplexDouble;
    case 12: return c10::ScalarType::Bool;
    case 13: return c10::ScalarType::BFloat16;
    case 28: return c10::ScalarType::UInt16;
    case 29: return c10::ScalarType::Float8_e4m3fn;
    case 30: return c10::ScalarType::Float8_e5m2;
    case 31: return c10::ScalarType::Float8_e4m3fnuz;
    case 32: return c10::ScalarType::Float8_e5m2fnuz;
    case 33: return c10::ScalarType::Float8_e8m0fnu;
    case 34: return c10::ScalarType::UInt32;
    case 35: return c10::ScalarType::UInt64;
    default: throw base::ConfigError("unknown dtype code " + std::to_string(code));
  }
}

// The code schema.py gives `type` (what a writer puts in a payload config); throws
// base::ConfigError for a dtype schema.py has no code for.
inline int dtype_code(c10::ScalarType type) {
  switch (type) {
    case c10::ScalarType::Byte: return 1;
    case c10::ScalarType::Char: return 2;
    case c10::ScalarType::Short: return 3;
    case c10::ScalarType::Int: return 4;
    case c10::ScalarType::Long: return 5;
    case c10::ScalarType::Half: return 6;
    case c10::ScalarType::Float: return 7;
    case c10::ScalarType::Double: return 8;
    case c10::ScalarType::ComplexHalf: return 9;
    case c10::ScalarType::ComplexFloat: return 10;
    case c10::ScalarType::ComplexDouble: return 11;
    case c10::ScalarType::Bool: return 12;
    case c10::ScalarType::BFloat16: return 13;
    case c10::ScalarType::UInt16: return 28;
    case c10::ScalarType::Float8_e4m3fn: return 29;
    case c10::ScalarType::Float8_e5m2: return 30;
    case c10::ScalarType::Float8_e4m3fnuz: return 31;
    case c10::ScalarType::Float8_e5m2fnuz: return 32;
    case c10::ScalarType::Float8_e8m0fnu: return 33;
    case c10::ScalarType::UInt32: return 34;
    case c10::ScalarType::UInt64: return 35;
    default:
      throw base::ConfigError(std::string("dtype ") + c10::toString(type) +
                              " has no torch.export serialization code");
  }
}

inline c10::MemoryFormat to_memory_format(int code) {
  switch (code) {
    case 1: return c10::MemoryFormat::Contiguous;
    case 2: return c10::MemoryFormat::ChannelsLast;
    case 3: return c10::MemoryFormat::ChannelsLast3d;
    case 4: return c10::MemoryFormat::Preserve;
    default: throw base::ConfigError("unknown memory format code " + std::to_string(code));
  }
}

inline c10::Layout to_layout(int code) {
  switch (code) {
    case 1: return c10::Layout::Sparse;
    case 2: return c10::Layout::SparseCsr;
    case 3: return c10::Layout::SparseCsc;
    case 4: return c10::Layout::SparseBsr;
    case 5: return c10::Layout::SparseBsc;
    case 6: return c10::Layout::Mkldnn;
    case 7: return c10::Layout::Strided;
    default: throw base::ConfigError("unknown layout code " + std::to_string(code));
  }
}

}  // namespace ravnest::exported
