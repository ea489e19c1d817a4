// MappedFile: a file's bytes mapped read-only instead of read into memory. The pages are the
// page cache's, clean and droppable under pressure, so sending a file of hundreds of MB (a
// checkpoint to its keeper) does not add its size to what the process holds. The mapping stays
// valid while the object lives, whatever happens to the file's name.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ravnest::config {

class MappedFile {
 public:
  // Throws ConfigError "PATH: cannot read: why" (not a regular file included).
  static std::shared_ptr<const MappedFile> open(const std::string& path);
  ~MappedFile();
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return static_cast<const uint8_t*>(data_); }
  size_t size() const { return size_; }

 private:
  MappedFile(void* data, size_t size) : data_(data), size_(size) {}
  void* data_;
  size_t size_;
};

}  // namespace ravnest::config
