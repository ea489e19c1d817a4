// Files through a schema::ByteSink, in bounded chunks, both ways: stream_file sends one from
// disk, FileDownload receives one whose size and checksum the sender tells only once it sent it
// (the fetch calls: fetchStage, fetchCheckpoint, fetchPredictions). A file of several GB never
// travels in one message (a capnp Data field holds at most 512 MiB) and is never held whole in
// memory: each side holds the chunks in flight (capnp's streaming window) and no more.
// (wire::FileSink, tensor_stream.h, receives a file whose size and checksum were announced first:
// pushFile, pushStage, storeCheckpoint.)
//
// Everything here runs on one KJ event loop thread. Disk I/O is synchronous, a chunk at a time.
#pragma once

#include <kj/async.h>

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <string>

#include "libs/wire/tensor_stream.h"
#include "schemas/ravnest.capnp.h"

namespace ravnest::wire {

// What stream_file sent: its bytes and their SHA-256 (lowercase hex).
struct SentFile {
  uint64_t bytes = 0;
  std::string sha256;
};

// Sends the file at `path` to `sink` as streaming `write` calls of at most `chunk_bytes`, each
// read from the file straight into its message, then calls done(); resolves with what was sent
// (the file as it was when opened: a rename over `path` meanwhile does not change it). Rejects,
// naming `path`, when the file cannot be read, and with the sink's error when a write or done()
// fails. Pages read leave the page cache behind the stream, so sending a file of GB does not
// fill a daemon's memory cgroup with them. `progress`, when given, counts the bytes handed to
// the connection so far (it must outlive the promise).
kj::Promise<SentFile> stream_file(schema::ByteSink::Client sink, const std::filesystem::path& path,
                                  size_t chunk_bytes = kDefaultChunkBytes,
                                  uint64_t* progress = nullptr);

// Receives a file into a temporary file beside `path`; keep() checks it against what the sender
// says it sent and renames it to `path`. Destroyed without keep(), the temporary is removed, so
// a fetch that fails leaves nothing behind. The sink may outlive this object: its writes then
// fail.
class FileDownload {
 public:
  // Throws std::runtime_error naming `path` when the temporary file cannot be created.
  explicit FileDownload(std::filesystem::path path);
  ~FileDownload();
  FileDownload(const FileDownload&) = delete;
  FileDownload& operator=(const FileDownload&) = delete;

  // The sink to hand the sender (one per download).
  schema::ByteSink::Client sink();
  uint64_t received_bytes() const;
  // Once the sender's call returned `bytes` and `sha256`: throws std::runtime_error "PATH: ..."
  // unless done() was called, the sizes match and the bytes hash to `sha256`; else fsyncs and
  // renames the temporary file to the path.
  void keep(uint64_t bytes, const std::string& sha256);

  struct State;

 private:
  std::shared_ptr<State> state_;
};

}  // namespace ravnest::wire
