// A real two-party capnp RPC over TCP on 127.0.0.1 in one process: the server (a Node serving
// `send` and `pushFile`) runs on its own KJ thread; transfers and files go through it and are
// compared byte for byte. Every wait is bounded.
#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <sys/stat.h>

#include <fstream>
#include <iterator>

#include "libs/base/sha256.h"
#include "libs/wire/file_stream.h"
#include "libs/wire/peer_links.h"
#include "tests/wire/wire_test_util.h"

using namespace ravnest::wire;
namespace schema = ravnest::schema;
using namespace ravnest::wire::test;
namespace fs = std::filesystem;

namespace {

// Sends `values` as one Transfer through node.send, streaming what is not inline.
kj::Promise<void> send_transfer(schema::Node::Client node, const std::vector<IndexedIValue>& values,
                                size_t inline_limit, size_t chunk_bytes = kDefaultChunkBytes) {
  auto request = node.sendRequest();
  auto transfer = request.initTransfer();
  transfer.setKind(schema::TransferKind::ACTIVATIONS);
  transfer.setFromNode(1);
  transfer.initBatch().setStep(7);
  auto encoded = kj::heap<EncodedTensors>(encode_values(transfer, values, inline_limit));
  auto& enc = *encoded;
  return request.send()
      .then([&enc, chunk_bytes](capnp::Response<schema::Node::SendResults>&& response)
                -> kj::Promise<void> {
        if (enc.streamed.empty()) return kj::READY_NOW;
        return stream_tensors(response.getSink(), std::move(enc.streamed), chunk_bytes);
      })
      .attach(kj::mv(encoded));  // keep_alive: the request referenced the inline tensors
}

void check_received(ServerThread& server, RpcClient& client, const std::vector<IndexedIValue>& sent) {
  auto event = next_event(server, client);
  REQUIRE(event.has_value());
  INFO(event->text);
  REQUIRE(event->kind == "values");
  REQUIRE(event->values.size() == sent.size());
  for (size_t i = 0; i < sent.size(); ++i) {
    std::string why;
    INFO("value " << i << " (" << sent[i].value.tagKind() << ")");
    CHECK(event->values[i].index == sent[i].index);
    CHECK(same_value(sent[i].value, event->values[i].value, &why));
    INFO(why);
  }
}

std::vector<IndexedIValue> every_kind(int seed) {
  at::manual_seed(seed);
  at::Tensor base = at::randn({64, 48});
  std::vector<IndexedIValue> v;
  uint32_t i = 0;
  auto add = [&](c10::IValue value) { v.push_back({i++, std::move(value)}); };
  add(c10::IValue());
  add(c10::IValue::uninitialized());
  add(c10::IValue(int64_t{42}));
  add(c10::IValue(-0.0));
  add(c10::IValue(true));
  add(c10::IValue(std::string("activations")));
  add(c10::IValue(c10::List<int64_t>({3, 1, 4})));
  add(c10::IValue(c10::List<double>({2.5, 1e-300})));
  add(c10::IValue(c10::List<bool>({false, true})));
  add(at::randn({}));                                        // scalar float32
  add(at::tensor(int64_t{-5}));                              // scalar int64
  add(at::empty({0}, at::kDouble));                          // 0-sized
  add(at::empty({4, 0, 3}, at::kBFloat16));                  // 0-sized, 3-d
  add(at::randn({5, 7}, at::kDouble));                       // small float64, inline
  add(at::randint(-1000, 1000, {3, 3}, at::kLong));          // small int64
  add(at::rand({33}) > 0.3);                                 // bool, odd size
  add(at::randn({9, 9}).to(at::kHalf));                      // half, odd byte count
  add(at::randn({100, 300}).to(at::kBFloat16));              // bfloat16, streamed
  add(at::randint(-(int64_t{1} << 40), int64_t{1} << 40, {20000}, at::kLong));  // int64 streamed
  add(at::rand({50001}) > 0.5);                              // bool streamed, odd size
  add(base.t());                                             // non-contiguous, streamed
  add(base.index({at::indexing::Slice(1, at::indexing::None, 2)}).t());  // non-contiguous
  add(at::randn({3, 4}).requires_grad_(true));               // requires grad, inline
  add(at::randn({200, 100}, at::kDouble).requires_grad_(true));  // requires grad, streamed
  add(at::randn({40000}).narrow(0, 1, 30001));               // misaligned offset, odd size
  return v;
}

}  // namespace

TEST_CASE("transfers with every value kind cross a real RPC connection byte-exactly",
          "[wire][rpc]") {
  TempDir dir;
  ServerThread server(dir.path);
  RpcClient client("127.0.0.1", server.port());
  auto node = client.main<schema::Node>();

  SECTION("inline and streamed, several chunk sizes, one connection") {
    for (auto [inline_limit, chunk] : std::vector<std::pair<size_t, size_t>>{
             {kDefaultInlineLimit, kDefaultChunkBytes},
             {1024, 4096},
             {0, 1000},          // everything streamed; chunks not a multiple of 8
             {size_t{1} << 28, kDefaultChunkBytes}}) {  // everything inline
      INFO("inline_limit " << inline_limit << " chunk " << chunk);
      auto values = every_kind(static_cast<int>(chunk));
      wait_bounded(send_transfer(node, values, inline_limit, chunk), client);
      check_received(server, client, values);
    }
  }

  SECTION("a transfer with no streamed tensor gets a null sink") {
    std::vector<IndexedIValue> values = {{0, at::ones({2, 2})}, {3, c10::IValue(1.5)}};
    wait_bounded(send_transfer(node, values, kDefaultInlineLimit), client);
    check_received(server, client, values);
  }

  SECTION("one 64 MiB tensor, streamed") {
    std::vector<IndexedIValue> values = {
        {0, at::randn({16, 1024, 1024})}, {1, at::randint(0, 9, {1000}, at::kLong)}};
    REQUIRE(tensor_bytes(values[0].value.toTensor()) == 64u << 20);
    for (int rep = 0; rep < 2; ++rep) {
      wait_bounded(send_transfer(node, values, kDefaultInlineLimit), client);
      check_received(server, client, values);
    }
  }

  SECTION("a 72 MiB tensor inline: the raised message limit holds on both ends") {
    std::vector<IndexedIValue> values = {{0, at::randn({18, 1024, 1024})}};
    wait_bounded(send_transfer(node, values, size_t{100} << 20), client);
    check_received(server, client, values);
  }
}

TEST_CASE("the default 64 MiB message limit refuses a large inline tensor", "[wire][rpc]") {
  TempDir dir;
  ConnectionOptions small;
  small.max_message_bytes = 64 << 20;
  ServerThread server(dir.path, {}, small);
  RpcClient client("127.0.0.1", server.port(), small);
  std::vector<IndexedIValue> values = {{0, at::randn({18, 1024, 1024})}};
  CHECK_THROWS_WITH(
      wait_bounded(send_transfer(client.main<schema::Node>(), values, size_t{100} << 20), client),
      Catch::Contains("larger than our single-message size limit"));
}

TEST_CASE("stream errors reach the sender over RPC, and the connection survives", "[wire][rpc]") {
  TempDir dir;
  ServerThread server(dir.path);
  RpcClient client("127.0.0.1", server.port());
  auto node = client.main<schema::Node>();

  // A transfer announcing one streamed float32 tensor of `announced` elements; the stream carries
  // `actual` elements instead.
  auto mismatched = [&](int64_t announced, int64_t actual) {
    auto request = node.sendRequest();
    auto transfer = request.initTransfer();
    encode_values(transfer, {{0, at::zeros({announced})}}, 0);
    auto response = wait_bounded(request.send(), client);
    return wait_bounded(
        stream_tensors(response.getSink(), {at::ones({actual})}, 64 * 1024), client);
  };
  // More bytes than announced, then fewer: the server's TensorSink fails the stream.
  CHECK_THROWS_WITH(mismatched(1 << 20, (1 << 20) + 1),
                    Catch::Contains("more bytes arrived than announced"));
  auto event = next_event(server, client);
  REQUIRE(event.has_value());
  CHECK(event->kind == "error");
  CHECK_THROWS_WITH(mismatched(1 << 20, (1 << 20) - 2), Catch::Contains("done() before"));
  event = next_event(server, client);
  REQUIRE(event.has_value());
  CHECK(event->kind == "error");

  // A malformed transfer is refused by the server's decoder.
  auto request = node.sendRequest();
  auto t = request.initTransfer().initValues(1)[0].initValue().initTensor();
  t.setDtype(99);
  t.initShape(0);
  CHECK_THROWS_WITH(wait_bounded(request.send(), client), Catch::Contains("dtype code 99"));
  event = next_event(server, client);
  REQUIRE(event.has_value());
  CHECK(event->kind == "error");

  // Still usable afterwards.
  std::vector<IndexedIValue> values = {{0, at::randn({300, 300})}};
  wait_bounded(send_transfer(node, values, 1024), client);
  check_received(server, client, values);
}

TEST_CASE("a stream dropped midway ends the receiver's sink, and memory stays valid",
          "[wire][rpc]") {
  TempDir dir;
  ServerThread server(dir.path);
  RpcClient client("127.0.0.1", server.port());
  auto node = client.main<schema::Node>();
  for (int rep = 0; rep < 3; ++rep) {
    auto request = node.sendRequest();
    auto encoded = encode_values(request.initTransfer(), {{0, at::randn({8, 1024, 1024})}}, 0);
    auto response = wait_bounded(request.send(), client);
    {
      // The only reference to the tensor goes into the stream; drop the stream after a few
      // event-loop turns (each sends at most one more 256 KiB chunk of the 32 MiB).
      auto stream = stream_tensors(response.getSink(), std::move(encoded.streamed), 256 * 1024);
      encoded.streamed.clear();
      for (int turn = 0; turn < 2 + 4 * rep; ++turn) kj::evalLater([]() {}).wait(client.wait_scope());
    }
    auto event = next_event(server, client);
    REQUIRE(event.has_value());
    CHECK(event->kind == "error");
    CHECK_THAT(event->text, Catch::Contains("done() before all announced bytes"));
  }
  std::vector<IndexedIValue> values = {{0, at::randn({1000, 1000})}};
  wait_bounded(send_transfer(node, values, 1024), client);
  check_received(server, client, values);
}

// ---------------------------------------------------------------------------------------------
// FileSink through pushFile.

namespace {

std::string random_bytes(size_t n, unsigned seed) {
  std::string s(n, '\0');
  std::mt19937 rng(seed);
  for (char& c : s) c = static_cast<char>(rng());
  return s;
}

std::string read_file(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

size_t count_entries(const fs::path& dir) {
  return static_cast<size_t>(std::distance(fs::directory_iterator(dir), fs::directory_iterator()));
}

// pushFile(name, size, sha) then the bytes of `content`.
void push_file(RpcClient& client, const std::string& name, uint64_t size, const std::string& sha,
               const std::string& content) {
  auto node = client.main<schema::Node>();
  auto request = node.pushFileRequest();
  request.setName(name);
  request.setSize(size);
  request.setSha256(sha);
  auto response = wait_bounded(request.send(), client);
  auto bytes = kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(content.data()),
                                            content.size());
  wait_bounded(stream_bytes(response.getSink(), bytes, 256 * 1024), client);
}

}  // namespace

TEST_CASE("FileSink stores a good file and refuses bad ones without leaving files", "[wire][file]") {
  TempDir dir;
  ServerThread server(dir.path);
  RpcClient client("127.0.0.1", server.port());
  const std::string content = random_bytes(3 * 1024 * 1024 + 5, 1);
  const std::string sha = ravnest::base::sha256_hex(content);

  SECTION("good file") {
    push_file(client, "data.bin", content.size(), sha, content);
    auto event = next_event(server, client);
    REQUIRE(event.has_value());
    REQUIRE(event->kind == "file");
    CHECK(read_file(dir.path / "data.bin") == content);
    CHECK(count_entries(dir.path) == 1);
  }
  SECTION("uppercase checksum and an empty file") {
    std::string upper = ravnest::base::sha256_hex("");
    for (char& c : upper) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    push_file(client, "empty.bin", 0, upper, "");
    auto event = next_event(server, client);
    REQUIRE(event.has_value());
    REQUIRE(event->kind == "file");
    CHECK(fs::file_size(dir.path / "empty.bin") == 0);
  }
  SECTION("wrong checksum") {
    std::string bad = sha;
    bad[10] = bad[10] == '0' ? '1' : '0';
    CHECK_THROWS_WITH(push_file(client, "data.bin", content.size(), bad, content),
                      Catch::Contains("SHA-256 mismatch"));
    auto event = next_event(server, client);
    REQUIRE(event.has_value());
    CHECK(event->kind == "error");
    CHECK(count_entries(dir.path) == 0);
  }
  SECTION("fewer bytes than the announced size") {
    CHECK_THROWS_WITH(push_file(client, "data.bin", content.size() + 1, sha, content),
                      Catch::Contains("size mismatch"));
    CHECK(next_event(server, client).has_value());
    CHECK(count_entries(dir.path) == 0);
  }
  SECTION("more bytes than the announced size") {
    CHECK_THROWS_WITH(push_file(client, "data.bin", content.size() - 1, sha, content),
                      Catch::Contains("more bytes arrived than announced"));
    CHECK(next_event(server, client).has_value());
    CHECK(count_entries(dir.path) == 0);
  }
  SECTION("the sender drops the sink before done()") {
    auto node = client.main<schema::Node>();
    auto request = node.pushFileRequest();
    request.setName("data.bin");
    request.setSize(content.size());
    request.setSha256(sha);
    {
      auto response = wait_bounded(request.send(), client);
      auto sink = response.getSink();
      auto write = sink.writeRequest();
      write.setChunk(kj::ArrayPtr<const kj::byte>(
          reinterpret_cast<const kj::byte*>(content.data()), 4096));
      wait_bounded(write.send(), client);
    }  // sink released: the server's FileSink is destroyed and deletes its temporary file
    auto event = next_event(server, client);
    REQUIRE(event.has_value());
    CHECK(event->kind == "error");
    CHECK_THAT(event->text, Catch::Contains("released before done"));
    CHECK(count_entries(dir.path) == 0);
  }
}

TEST_CASE("stream_file sends a file from disk in chunks, through pushFile's FileSink",
          "[wire][file]") {
  TempDir dir;
  TempDir out;
  ServerThread server(out.path);
  RpcClient client("127.0.0.1", server.port());
  // Not a multiple of the chunk: the last write is short.
  const std::string content = random_bytes(3 * 1024 * 1024 + 13, 5);
  const fs::path source = dir.path / "source.bin";
  std::ofstream(source, std::ios::binary) << content;
  auto node = client.main<schema::Node>();
  auto request = node.pushFileRequest();
  request.setName("data.bin");
  request.setSize(content.size());
  request.setSha256(ravnest::base::sha256_hex(content));
  uint64_t progress = 0;
  auto sent = wait_bounded(
      stream_file(request.send().getSink(), source, 256 * 1024, &progress), client);
  CHECK(sent.bytes == content.size());
  CHECK(progress == content.size());
  CHECK(sent.sha256 == ravnest::base::sha256_hex(content));
  auto event = next_event(server, client);
  REQUIRE(event.has_value());
  REQUIRE(event->kind == "file");
  CHECK(read_file(out.path / "data.bin") == content);
  CHECK_THROWS_WITH(wait_bounded(stream_file(node.pushFileRequest().send().getSink(),
                                             dir.path / "missing.bin"),
                                 client),
                    Catch::Contains("missing.bin: cannot read: No such file or directory"));
  // A FIFO in a file's place must not hang the sender.
  REQUIRE(::mkfifo((dir.path / "fifo.bin").c_str(), 0600) == 0);
  CHECK_THROWS_WITH(wait_bounded(stream_file(node.pushFileRequest().send().getSink(),
                                             dir.path / "fifo.bin"),
                                 client),
                    Catch::Contains("fifo.bin: cannot read: not a regular file"));
}

TEST_CASE("FileDownload keeps a file only once its size and checksum are the sender's",
          "[wire][file]") {
  TempDir dir;
  TempDir server_dir;
  ServerThread server(server_dir.path);
  RpcClient client("127.0.0.1", server.port());  // its event loop: the sinks are local
  const std::string content = random_bytes(1024 * 1024 + 7, 9);
  const fs::path source = dir.path / "source.bin";
  std::ofstream(source, std::ios::binary) << content;
  const fs::path target = dir.path / "fetched.bin";
  SECTION("as sent") {
    FileDownload download(target);
    auto sent = wait_bounded(stream_file(download.sink(), source, 100000), client);
    CHECK(download.received_bytes() == content.size());
    download.keep(sent.bytes, sent.sha256);
    CHECK(read_file(target) == content);
  }
  SECTION("another checksum") {
    FileDownload download(target);
    auto sent = wait_bounded(stream_file(download.sink(), source), client);
    CHECK_THROWS_WITH(download.keep(sent.bytes, ravnest::base::sha256_hex("x")),
                      Catch::Contains("fetched.bin: the bytes received hash to "));
  }
  SECTION("another size") {
    FileDownload download(target);
    auto sent = wait_bounded(stream_file(download.sink(), source), client);
    CHECK_THROWS_WITH(download.keep(sent.bytes + 1, sent.sha256),
                      Catch::Contains("bytes arrived, the sender sent"));
  }
  SECTION("the sender never said done") {
    FileDownload download(target);
    auto sink = download.sink();
    auto write = sink.writeRequest();
    write.setChunk(kj::ArrayPtr<const kj::byte>(reinterpret_cast<const kj::byte*>(content.data()), 10));
    wait_bounded(write.send(), client);
    CHECK_THROWS_WITH(download.keep(10, ravnest::base::sha256_hex(content.substr(0, 10))),
                      Catch::Contains("before the sender said it was done"));
  }
  SECTION("dropped") {
    FileDownload download(target);
    wait_bounded(stream_file(download.sink(), source), client);
  }
  // Only the source, and the target when it was kept.
  CHECK(count_entries(dir.path) == (fs::exists(target) ? 2u : 1u));
}

TEST_CASE("FileSink hands a checked file to its commit, which may refuse it", "[wire][file]") {
  TempDir dir;
  TempDir server_dir;
  ServerThread server(server_dir.path);
  RpcClient client("127.0.0.1", server.port());  // its event loop: the sinks are local
  const std::string content = random_bytes(300000, 3);
  const fs::path source = dir.path / "source.bin";
  std::ofstream(source, std::ios::binary) << content;
  const fs::path out = dir.path / "out";
  fs::create_directories(out);
  std::string taken;
  SECTION("taken") {
    auto opened = FileSink::open(out, "stage.pt", content.size(),
                                 ravnest::base::sha256_hex(content),
                                 [&](const fs::path& temp) {
                                   taken = read_file(temp);
                                   fs::rename(temp, out / "kept.pt");
                                 });
    wait_bounded(stream_file(kj::mv(opened.sink), source), client);
    wait_bounded(kj::mv(opened.completion), client);
    CHECK(taken == content);
    CHECK(read_file(out / "kept.pt") == content);
    CHECK(count_entries(out) == 1);
  }
  SECTION("refused") {
    auto opened = FileSink::open(out, "stage.pt", content.size(),
                                 ravnest::base::sha256_hex(content),
                                 [&](const fs::path&) { throw std::runtime_error("no module"); });
    CHECK_THROWS_WITH(wait_bounded(stream_file(kj::mv(opened.sink), source), client),
                      Catch::Contains("no module"));
    CHECK(count_entries(out) == 0);
  }
}

TEST_CASE("FileSink errors read as one line, without KJ's name = value details", "[wire][file]") {
  TempDir dir;
  ServerThread server(dir.path);
  RpcClient client("127.0.0.1", server.port());
  const std::string content(10000, 'x');
  const std::string sha = ravnest::base::sha256_hex(content);
  std::string bad = sha;
  bad[3] = bad[3] == '0' ? '1' : '0';
  try {
    push_file(client, "data.bin", content.size(), bad, content);
    FAIL("a wrong checksum was accepted");
  } catch (const kj::Exception& e) {
    const std::string text = e.getDescription().cStr();
    INFO(text);
    CHECK(text.find("data.bin: SHA-256 mismatch: the bytes received hash to " + sha +
                    ", expected " + bad) != std::string::npos);
    CHECK(text.find(" = ") == std::string::npos);
  }
}

TEST_CASE("PeerLinks reconnects to a daemon started again on its port", "[wire][links]") {
  TempDir dir;
  const std::string secret = "links-secret";
  auto start = [&](uint16_t port) {
    return std::make_unique<ServerThread>(dir.path, DecodeLimits{}, ConnectionOptions{}, port,
                                          secret);
  };
  auto server = start(0);
  const uint16_t port = server->port();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  PeerLinks links(make_transport_security(secret));
  auto wait = [&](kj::Promise<void>&& promise) {
    promise
        .exclusiveJoin(links.timer().afterDelay(30 * kj::SECONDS).then([]() {
          kj::throwFatalException(KJ_EXCEPTION(FAILED, "test timed out"));
        }))
        .wait(links.wait_scope());
  };
  // One transfer without tensors; the TestNode records it.
  auto call = [&](bool watched) {
    auto request = links.node(address).sendRequest();
    auto transfer = request.initTransfer();
    transfer.setKind(schema::TransferKind::ACTIVATIONS);
    encode_values(transfer, {{0, c10::IValue(int64_t{1})}}, kDefaultInlineLimit);
    kj::Promise<void> sent = request.send().ignoreResult();
    return watched ? links.watch(address, kj::mv(sent)) : kj::mv(sent);
  };
  REQUIRE_NOTHROW(wait(call(true)));

  SECTION("a failed call drops the connection: the next one reaches the new daemon") {
    server.reset();  // the daemon dies; the cached connection with it
    server = start(port);
    CHECK_THROWS(wait(call(true)));   // over the dead connection, which it drops
    CHECK_NOTHROW(wait(call(true)));  // a new connection
    CHECK_NOTHROW(wait(call(true)));  // kept
  }
  SECTION("without watch() the dead connection stays cached") {
    server.reset();
    server = start(port);
    CHECK_THROWS(wait(call(false)));
    CHECK_THROWS(wait(call(false)));
    links.drop_all();  // what a daemon does when a job is loaded
    CHECK_NOTHROW(wait(call(false)));
  }
}
