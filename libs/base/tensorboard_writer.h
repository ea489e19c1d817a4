// TensorBoardWriter: scalars in a TensorBoard event file (events.out.tfevents.<seconds>.<host>),
// written without TensorFlow or protobuf. The file is a sequence of TFRecords (uint64 length,
// masked CRC-32C of the length, the bytes, masked CRC-32C of the bytes; little-endian), each an
// `Event` message (tensorflow/core/util/event.proto) encoded by hand: wall_time (1, double),
// step (2, int64), file_version (3, "brain.Event:2", the first record only) or summary (5) of
// one value {tag (1), simple_value (2, float)}.
//
// Each record is written and flushed as it comes, so that a TensorBoard watching the folder
// sees the run grow, and a crash loses at most the record being written. Not thread-safe.
// Errors: std::runtime_error naming the file (cannot create, cannot write).
#pragma once

#include <cstdint>
#include <fstream>
#include <string>

namespace ravnest::base {

class TensorBoardWriter {
 public:
  // Creates `dir` (and its parents) and a new event file in it, named for `wall_time` (seconds
  // since the epoch) and this host, starting with the file_version record.
  TensorBoardWriter(const std::string& dir, double wall_time);

  // One scalar: `tag` (e.g. "train/loss") at `step`, `value` stored as a float (TensorBoard's
  // simple_value).
  void add_scalar(const std::string& tag, int64_t step, double value, double wall_time);

  const std::string& path() const { return path_; }

  // The bytes of one record, its TFRecord framing included: a scalar's Event, and the
  // file_version Event every event file starts with.
  static std::string scalar_record(const std::string& tag, int64_t step, double value, double wall_time);
  static std::string version_record(double wall_time);

 private:
  void write(const std::string& record);

  std::string path_;
  std::ofstream out_;
};

}  // namespace ravnest::base
