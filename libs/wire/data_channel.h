// DataChannel: one ring link's segments over a TCP connection of its own, outside Cap'n Proto.
// The sending member's sender thread writes each segment straight from the all-reduce's memory;
// the receiving member's ring thread reads it straight into place, or adds it piece by piece
// while the piece is still in the cache, as Gloo does. With TLS on, every record is sealed with
// AES-256-GCM on those same two threads: one encryption context per link, no RPC thread between.
//
// Why (docs/performance.md#data-channels): through the node's RPC connection every segment was
// a Cap'n Proto message in a buffer allocated for it (fresh pages, faulted in and unmapped again:
// a quarter of all CPU time), went through kj-tls's 8 KiB buffers, and every link of the daemon
// was encrypted and decrypted by its one RPC thread.
//
// Setting up: the sender draws a token and, with TLS, a key (random_bytes), gives both to the
// receiver inside Node.openRing (over the node's connection: authenticated by the gate and
// encrypted), then connects to the receiver's daemon port (connect()) and writes the preface,
// kChannelPreface then the token. The daemon's listener tells the preface from TLS and Cap'n
// Proto by its first byte (starts_data_channel) and hands the socket to whoever registered the
// token, once. Nobody else can use a channel: the token travelled encrypted, and with TLS each
// record is authenticated under a key only the two ends hold; a record that fails it ends the
// channel.
//
// Framing, per segment: a header record {round, step, segment, bytes, kind, key}, then the bytes
// in records of at most kChannelRecordBytes. Sealed (a key): each record is its AES-256-GCM
// ciphertext followed by the 16-byte tag. The header, the acknowledgments and the records of a
// frame of kind 0 are sealed under the channel's key, under 96-bit nonces that count them from 0
// (a key serves one channel in one direction, so no nonce repeats). A relayable frame (kind 1)
// carries a key of its own, drawn for it, in its header: its records are sealed under that key,
// each under its place in the frame as the nonce, so that a receiver can keep them as they came
// (SealedFrame) and pass them on to the next member unchanged (relay()), under a header of its
// own sealed under its own channel's key: the ring's all-gather forwards each segment N - 2
// times, and sealing it again at every hop was a sixth of a member's AES work at N = 4.
// Plain (no key: --insecure): the header's 64 bytes, then the bytes as they are; no kind 1.
//
// Threads: one thread sends (send) and one receives (recv, recv_pieces) at a time; both block
// on the socket, waking every `poll_ms` to call the caller's `idle`, which throws to give up (an
// abort, a peer that stopped answering). shutdown() may be called from any thread: whatever
// blocks on the channel then fails at once. Errors throw std::runtime_error naming the peer.
#pragma once

#include <openssl/evp.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace ravnest::wire {

inline constexpr size_t kChannelTokenBytes = 32;
inline constexpr size_t kChannelKeyBytes = 32;
inline constexpr size_t kChannelRecordBytes = size_t{128} << 10;
// Records sealed (sender) or read (receiver) together: one system call for each such batch.
inline constexpr size_t kChannelBatchRecords = 8;
// 8 bytes before the token. Its first byte is neither TLS's handshake (0x16) nor the first byte
// of a Cap'n Proto frame ravnest sends (0): protocol_mismatch.h.
inline constexpr char kChannelPreface[8] = {'R', 'V', 'N', 'C', 'H', 'A', 'N', '2'};
inline constexpr size_t kChannelPrefaceBytes = sizeof(kChannelPreface) + kChannelTokenBytes;

inline bool starts_data_channel(uint8_t first_byte) {
  return first_byte == static_cast<uint8_t>(kChannelPreface[0]);
}

// `n` bytes from OpenSSL's random generator; throws std::runtime_error when it has none.
std::string random_bytes(size_t n);

// What a frame announces; the receiver says what it expects and gets exactly that or an error.
struct ChannelFrame {
  uint64_t round = 0;
  uint32_t step = 0;
  uint32_t segment = 0;
  uint64_t bytes = 0;
  bool operator==(const ChannelFrame& o) const {
    return round == o.round && step == o.step && segment == o.segment && bytes == o.bytes;
  }
  std::string to_string() const;
};

// A relayable frame as it came over a sealed channel, kept to be passed on unchanged: the
// frame's key and its records as sealed. `key` empty: nothing kept (a plain channel, or a frame
// sealed under the channel's key). Holds a key: the owner clears it once relayed.
struct SealedFrame {
  std::string key;
  std::vector<uint8_t> records;  // each record's bytes, then its tag
};

class DataChannel {
 public:
  using Idle = std::function<void()>;

  // `fd`: a connected TCP socket, owned from here on (made blocking). `key`: kChannelKeyBytes
  // to seal every record, or empty for plain records. `peer` names the other end in errors.
  DataChannel(int fd, const std::string& key, std::string peer, int poll_ms = 1000);
  ~DataChannel();
  DataChannel(const DataChannel&) = delete;
  DataChannel& operator=(const DataChannel&) = delete;

  // Connects to `address` ("host:port", a daemon's port), writes the preface with `token`, and
  // returns the sending end. Blocks at most `timeout_ms`; throws std::runtime_error.
  static std::unique_ptr<DataChannel> connect(const std::string& address, const std::string& token,
                                              const std::string& key, int timeout_ms = 5000);

  // Writes one frame: `frame.bytes` bytes from `data`. Returns once the kernel holds them (the
  // caller may then reuse `data`). Throws when the socket fails, when nothing could be written
  // for `stall_seconds`, or when `idle` throws. `relayable`: under a key of the frame's own
  // (kind 1), so that the receiver can relay() it (a plain channel sends it as any frame).
  void send(const ChannelFrame& frame, const void* data, const Idle& idle, bool relayable = false);
  // Writes `kept` (what recv kept of a relayable frame, whose bytes are `frame.bytes`) as the
  // frame `frame`: a new header, the records as they are. Throws as send does, and
  // std::logic_error when `kept` holds no such frame or the channel is plain.
  void relay(const ChannelFrame& frame, const SealedFrame& kept, const Idle& idle);
  // Returns once the receiver has read every frame sent so far: each recv answers with an
  // acknowledgment (its count; sealed too, under nonces of their own). A ring member's reduce
  // ends only when its successor took everything, as over RPC, so that members never disagree on
  // whether a round completed. Throws as send does, or after `stall_seconds` without an answer.
  void wait_acknowledged(const Idle& idle);
  // Reads the next frame, which must be `expect`, into `out`. With `keep`: a relayable frame's
  // key and sealed records are kept there (its records' memory reused), anything else leaves
  // keep->key empty.
  void recv(const ChannelFrame& expect, void* out, const Idle& idle, SealedFrame* keep = nullptr);
  // The same, handing the bytes to `use(offset, piece, size)` in consecutive pieces of at most
  // kChannelRecordBytes (multiples of 64 bytes but the last), each valid until `use` returns.
  using PieceUse = std::function<void(size_t, const void*, size_t)>;
  void recv_pieces(const ChannelFrame& expect, const PieceUse& use, const Idle& idle);

  void shutdown();  // any thread
  bool sealed() const { return cipher_ != nullptr; }
  const std::string& peer() const { return peer_; }

  static constexpr double stall_seconds = 10;

 private:
  void write_all(const void* data, size_t bytes, const Idle& idle);
  void read_all(void* data, size_t bytes, const Idle& idle);
  // Seals `bytes` of `plain` into `out` (bytes + 16: ciphertext then tag) under `ctx`'s key.
  void seal_with(EVP_CIPHER_CTX* ctx, const uint8_t nonce[12], const void* plain, size_t bytes,
                 uint8_t* out);
  // Opens `bytes` + 16 sealed bytes at `sealed` into `out` (may be `sealed`); throws when the
  // record is not authentic.
  void open_with(EVP_CIPHER_CTX* ctx, const uint8_t nonce[12], const uint8_t* sealed,
                 size_t bytes, void* out);
  // Under the channel's key and the next nonce of `sequence`: frames' records and headers
  // (0, records_) or acknowledgments (1, acks_).
  void seal(const void* plain, size_t bytes, uint8_t* out, uint32_t sequence = 0);
  void open(const uint8_t* sealed, size_t bytes, void* out, uint32_t sequence = 0);
  // Record `index` of a frame of `kind`: under the channel's key and its counted nonce, or
  // under the frame's key (set_frame_key) with `index` as the nonce.
  void seal_record(uint32_t kind, uint64_t index, const void* plain, size_t bytes, uint8_t* out);
  void open_record(uint32_t kind, uint64_t index, uint8_t* sealed, size_t bytes, void* out);
  // frame_cipher_ takes a relayable frame's kChannelKeyBytes `key`.
  void set_frame_key(const void* key);
  void send_acknowledgment(const Idle& idle);
  // Reads and checks the header; returns the frame's kind. A relayable frame's key is then set
  // in frame_cipher_, and copied to `frame_key` when given.
  uint32_t read_header(const ChannelFrame& expect, const Idle& idle, std::string* frame_key);
  // Reads the sealed records of the next min(left, a batch) bytes of a frame into `into` (each
  // record's bytes then its tag).
  void read_sealed(uint8_t* into, uint64_t left, const Idle& idle);
  // Reads and opens the `bytes` of a sealed frame of `kind`, a batch at a time: into `kept` at
  // their place (the whole frame as it came) or else into scratch_; each record opens to `out`
  // at its offset, or else in place, then goes to `use` when given.
  void open_records(uint32_t kind, uint64_t bytes, uint8_t* kept, uint8_t* out,
                    const PieceUse* use, const Idle& idle);

  int fd_;
  std::string peer_;
  int poll_ms_;
  int lowat_ = 1;       // the socket's SO_RCVLOWAT as last set
  size_t wanted_ = 0;   // the bytes read_all last waited for (capped at a batch)
  EVP_CIPHER_CTX* cipher_ = nullptr;  // null: plain
  EVP_CIPHER_CTX* frame_cipher_ = nullptr;  // relayable frames' (the last one's key)
  uint64_t records_ = 0;              // frames' records sealed (sender) or opened (receiver)
  uint64_t acks_ = 0;                 // acknowledgments sealed (receiver) or opened (sender)
  uint64_t frames_sent_ = 0;
  uint64_t frames_acknowledged_ = 0;
  uint64_t frames_received_ = 0;
  std::vector<uint8_t> scratch_;      // a batch of sealed records, or one plain piece
  std::atomic<bool> shut_{false};
};

}  // namespace ravnest::wire
