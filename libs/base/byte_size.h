// Byte sizes as people write and read them: "600MiB" or "1.4GB" in a config file or a flag, and
// "652 MB" in a message. One formatting of bytes for every line the CLI and the daemon print.
// Pure C++.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

namespace ravnest::base {

// "0 B", "950 B", "12.3 kB", "4.56 MB", "1.20 GB" (powers of 1000, three significant digits).
std::string format_bytes(uint64_t bytes);

// A whole number of bytes, or a number (a decimal fraction allowed) followed by a unit, with or
// without a space: B; kB, MB, GB, TB (powers of 1000); KiB, MiB, GiB, TiB (powers of 1024).
// Units are read without regard to case ("600mib"). A bare K, M or G is refused: systemd reads
// "600M" as MiB, Kubernetes as 10^6 bytes. A fraction of a byte is dropped. Returns nullopt for
// anything else (empty, a sign, garbage, more than INT64_MAX bytes), with `why` saying which, in
// words that follow the quoted value ("is not a size (...)", "is more than ... bytes").
std::optional<int64_t> parse_byte_size(const std::string& text, std::string* why = nullptr);

}  // namespace ravnest::base
