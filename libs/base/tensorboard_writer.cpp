#include "libs/base/tensorboard_writer.h"

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "libs/base/crc32c.h"

namespace ravnest::base {
namespace {

// Protocol buffers' wire format, the four pieces an Event needs.
void varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out += static_cast<char>((value & 0x7F) | 0x80);
    value >>= 7;
  }
  out += static_cast<char>(value);
}

void key(std::string& out, int field, int wire_type) {
  varint(out, static_cast<uint64_t>(field) << 3 | static_cast<uint64_t>(wire_type));
}

template <typename T>
void little_endian(std::string& out, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) out += static_cast<char>((value >> (8 * i)) & 0xFF);
}

void fixed64_double(std::string& out, int field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  key(out, field, 1);
  little_endian(out, bits);
}

void fixed32_float(std::string& out, int field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  key(out, field, 5);
  little_endian(out, bits);
}

void bytes_field(std::string& out, int field, const std::string& bytes) {
  key(out, field, 2);
  varint(out, bytes.size());
  out += bytes;
}

// TFRecord framing around one serialized message.
std::string frame(const std::string& data) {
  std::string length;
  little_endian(length, static_cast<uint64_t>(data.size()));
  std::string record = length;
  little_endian(record, masked_crc32c(length));
  record += data;
  little_endian(record, masked_crc32c(data));
  return record;
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "localhost";
  return name;
}

}  // namespace

std::string TensorBoardWriter::version_record(double wall_time) {
  std::string event;
  fixed64_double(event, 1, wall_time);
  bytes_field(event, 3, "brain.Event:2");
  return frame(event);
}

std::string TensorBoardWriter::scalar_record(const std::string& tag, int64_t step, double value,
                                             double wall_time) {
  std::string summary_value;
  bytes_field(summary_value, 1, tag);
  fixed32_float(summary_value, 2, static_cast<float>(value));
  std::string summary;
  bytes_field(summary, 1, summary_value);
  std::string event;
  fixed64_double(event, 1, wall_time);
  key(event, 2, 0);
  varint(event, static_cast<uint64_t>(step));  // int64: negative steps as ten bytes, as protobuf
  bytes_field(event, 5, summary);
  return frame(event);
}

TensorBoardWriter::TensorBoardWriter(const std::string& dir, double wall_time) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw std::runtime_error(dir + ": cannot create the metrics folder: " + ec.message());
  path_ = (std::filesystem::path(dir) / ("events.out.tfevents." +
                                         std::to_string(static_cast<int64_t>(std::floor(wall_time))) +
                                         "." + host_name()))
              .string();
  out_.open(path_, std::ios::binary | std::ios::app);
  if (!out_) throw std::runtime_error(path_ + ": cannot create the TensorBoard event file");
  write(version_record(wall_time));
}

void TensorBoardWriter::add_scalar(const std::string& tag, int64_t step, double value, double wall_time) {
  write(scalar_record(tag, step, value, wall_time));
}

void TensorBoardWriter::write(const std::string& record) {
  out_.write(record.data(), static_cast<std::streamsize>(record.size()));
  out_.flush();
  if (!out_) throw std::runtime_error(path_ + ": cannot write the TensorBoard event file");
}

}  // namespace ravnest::base
