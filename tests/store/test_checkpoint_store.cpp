// CheckpointStore and the checkpoint file: what is written is read back bit for bit (the
// optimizer's state too), only complete files are listed, the newest three are kept, leftovers
// of a crash are removed, damaged files are told from intact ones, a finished job is marked,
// and an identity from the wire can never name a path outside the store.
#include <catch2/catch.hpp>

#include <fstream>

#include <torch/nn/modules/linear.h>
#include <torch/optim/adam.h>

#include "libs/store/checkpoint_store.h"
#include "tests/support/test_env.h"

using namespace ravnest;
using store::CheckpointStore;
using training::StageCheckpoint;
namespace fs = std::filesystem;

namespace {

const std::string kIdentity = "0123456789abcdef0123456789abcdef";

StageCheckpoint sample(uint64_t updates) {
  StageCheckpoint c;
  c.identity = kIdentity;
  c.cluster = 0;
  c.position = 2;
  c.updates = updates;
  c.batches = updates * 3;
  c.epoch = 1;
  c.lr_steps = 7;
  c.reduce_round = 11;
  c.shared_round = 13;
  c.random_state = at::arange(20, at::kByte);
  c.losses = "2.30259\n1.5\n";
  c.state = {{"fc.weight", at::randn({3, 4})}, {"bn.num_batches_tracked", at::full({}, 5, at::kLong)}};
  return c;
}

}  // namespace

TEST_CASE("a checkpoint is read back as written, optimizer state included", "[checkpoint]") {
  test::TempDir dir;
  torch::nn::Linear linear(4, 3);
  torch::optim::Adam adam(linear->parameters(), torch::optim::AdamOptions(0.01));
  for (int i = 0; i < 3; ++i) {
    adam.zero_grad();
    linear->forward(torch::randn({5, 4})).pow(2).sum().backward();
    adam.step();
  }
  StageCheckpoint c = sample(8);
  c.optimizer = training::save_optimizer(adam);
  c.next_random_state = at::arange(7, at::kByte);
  CheckpointStore store(dir.path());
  store.write(c);
  const StageCheckpoint back = store.read(kIdentity, 8, 0, 2);
  CHECK(back.batches == 24);
  CHECK(back.epoch == 1);
  CHECK(back.lr_steps == 7);
  CHECK(back.reduce_round == 11);
  CHECK(back.shared_round == 13);
  CHECK(back.losses == c.losses);
  CHECK(at::equal(back.random_state, c.random_state));
  CHECK(at::equal(back.next_random_state, c.next_random_state));
  REQUIRE(back.state.size() == 2);
  CHECK(back.state[0].first == "fc.weight");
  CHECK(at::equal(back.state[0].second, c.state[0].second));
  CHECK(back.state[1].second.scalar_type() == at::kLong);

  // A fresh optimizer given the bytes takes the same next step as the original.
  torch::nn::Linear copy(4, 3);
  {
    torch::NoGradGuard no_grad;
    copy->weight.copy_(linear->weight);
    copy->bias.copy_(linear->bias);
  }
  torch::optim::Adam restored(copy->parameters(), torch::optim::AdamOptions(0.01));
  training::restore_optimizer(restored, back.optimizer);
  const auto input = torch::randn({5, 4});
  for (auto* pair : {&adam, &restored}) pair->zero_grad();
  linear->forward(input).pow(2).sum().backward();
  copy->forward(input).pow(2).sum().backward();
  adam.step();
  restored.step();
  CHECK(at::equal(linear->weight, copy->weight));
}

TEST_CASE("a checkpoint damaged after it was written is refused when read", "[checkpoint]") {
  // Issue 28's probe: 64 bytes flipped inside a checkpoint were loaded by `ravnest resume`
  // without complaint, and training went on from other weights.
  test::TempDir dir;
  CheckpointStore store(dir.path());
  store.write(sample(8));
  const auto file = store.file(kIdentity, 8);
  std::string bytes = test::read_text(file);
  const std::string intact = bytes;
  // Inside the archive (the state tensors' bytes): a zip reader does not check these.
  for (size_t i = 0; i < 64; ++i) bytes[bytes.size() / 2 + i] ^= 0x5a;
  test::write_text(file, bytes);
  CHECK_THROWS_WITH(store.read(kIdentity, 8, 0, 2),
                    Catch::StartsWith(file.string() + ": damaged: its bytes hash to ") &&
                        Catch::Contains(" it was written with"));
  // Truncated: the trailer is gone, so what is left is read as an archive, and is none.
  test::write_text(file, intact.substr(0, intact.size() / 2));
  CHECK_THROWS_WITH(store.read(kIdentity, 8, 0, 2), Catch::Contains("not a readable checkpoint"));
  test::write_text(file, intact);
  CHECK(store.read(kIdentity, 8, 0, 2).batches == 24);
}

TEST_CASE("intact lists the checkpoints whose bytes still match; validation and data travel",
          "[checkpoint]") {
  // What `ravnest resume` chooses from: a damaged or truncated file is left out, so the resume
  // falls back to the keeper's copy or an older update instead of failing on it.
  test::TempDir dir;
  CheckpointStore store(dir.path());
  for (uint64_t u : {4, 8, 12}) {
    StageCheckpoint c = sample(u);
    c.validation = "4 0 0.5 0.9\n";
    c.has_validation = true;
    c.data = "data.train\tabc/d.csv\n";
    store.write(c);
  }
  const std::string flipped = store.file(kIdentity, 12).string();
  std::string bytes = test::read_text(flipped);
  for (size_t i = 0; i < 64; ++i) bytes[bytes.size() / 2 + i] ^= 0x5a;
  test::write_text(flipped, bytes);
  fs::resize_file(store.file(kIdentity, 4), 100);
  auto file_of = [&](uint64_t u) { return store.file(kIdentity, u); };
  CHECK(store.updates(kIdentity) == std::vector<uint64_t>{4, 8, 12});
  CHECK(CheckpointStore::intact(store.updates(kIdentity), file_of) == std::vector<uint64_t>{8});
  const StageCheckpoint back = store.read(kIdentity, 8, 0, 2);
  CHECK(back.has_validation);
  CHECK(back.validation == "4 0 0.5 0.9\n");
  CHECK(back.data == "data.train\tabc/d.csv\n");

  // A finished job says so until it starts afresh.
  CHECK_FALSE(store.finished(kIdentity));
  store.mark_finished(kIdentity);
  CHECK(store.finished(kIdentity));
  CHECK(store.updates(kIdentity) == std::vector<uint64_t>{4, 8, 12});  // the marker is no checkpoint
  store.clear(kIdentity);
  CHECK_FALSE(store.finished(kIdentity));
}

TEST_CASE("usable lists only the intact checkpoints of that job, slot and update", "[checkpoint]") {
  // Issue 43: a checkpoint intact by its hash but of another node, job or update (copied in,
  // an older one renamed, a directory in its place) counted as intact, and every resume refused
  // it on load. `usable` leaves it out, so the resume takes the keeper's copy or an older update.
  test::TempDir dir;
  CheckpointStore store(dir.path());
  for (uint64_t u : {4, 8, 12, 16}) store.write(sample(u));
  CheckpointStore other_store(dir / "other");
  StageCheckpoint other_slot = sample(20);
  other_slot.position = 1;
  other_store.write(other_slot);
  StageCheckpoint other_job = sample(24);
  other_job.identity = "fedcba9876543210fedcba9876543210";
  other_store.write(other_job);
  // Update 16 is update 8 renamed (keep = 3 dropped update 4's file: a directory takes its
  // place); update 20 is another slot's; update 24 another job's.
  fs::copy_file(store.file(kIdentity, 8), store.file(kIdentity, 16), fs::copy_options::overwrite_existing);
  fs::create_directories(store.file(kIdentity, 4));
  fs::copy_file(other_store.file(kIdentity, 20), store.file(kIdentity, 20));
  fs::copy_file(other_store.file(other_job.identity, 24), store.file(kIdentity, 24));
  auto file_of = [&](uint64_t u) { return store.file(kIdentity, u); };
  const std::vector<uint64_t> all = {4, 8, 12, 16, 20, 24};
  CHECK(CheckpointStore::intact({8, 12, 16, 20, 24}, file_of) ==
        std::vector<uint64_t>{8, 12, 16, 20, 24});  // every file's bytes match its checksum
  CHECK(CheckpointStore::usable(all, file_of, kIdentity, 0, 2) == std::vector<uint64_t>{8, 12});
  CHECK(CheckpointStore::usable(all, file_of, kIdentity, -1, -1) == std::vector<uint64_t>{8, 12, 20});
  CHECK(CheckpointStore::usable(all, file_of, kIdentity, 0, 1) == std::vector<uint64_t>{20});
}

TEST_CASE("fp16's loss scale travels in the checkpoint; absent, it says so", "[checkpoint]") {
  test::TempDir dir;
  CheckpointStore store(dir.path());
  StageCheckpoint c = sample(4);
  c.has_loss_scale = true;
  c.loss_scale = 268435456.0;  // 2^28
  c.loss_scale_growth_tracker = 3;
  store.write(c);
  store.write(sample(8));  // no fp16
  const StageCheckpoint with = store.read(kIdentity, 4, 0, 2);
  CHECK(with.has_loss_scale);
  CHECK(with.loss_scale == 268435456.0);
  CHECK(with.loss_scale_growth_tracker == 3);
  CHECK_FALSE(store.read(kIdentity, 8, 0, 2).has_loss_scale);
}

TEST_CASE("the store keeps the newest three and lists complete files only", "[checkpoint]") {
  test::TempDir dir;
  {
    CheckpointStore store(dir.path());
    for (uint64_t u : {4, 8, 12, 16, 20}) store.write(sample(u));
    CHECK(store.updates(kIdentity) == std::vector<uint64_t>{12, 16, 20});
    CHECK(store.updates("00000000").empty());
    CHECK_THROWS_WITH(store.read(kIdentity, 4, 0, 2), Catch::Contains("no checkpoint after update 4"));
    CHECK_THROWS_WITH(store.read(kIdentity, 20, 0, 3), Catch::Contains("another job or stage"));
  }
  // A crash left half a file behind: not listed, and gone once the store opens again.
  const fs::path half = dir.path() / kIdentity / "update_24.pt.tmp";
  std::ofstream(half) << "half";
  std::ofstream(dir.path() / kIdentity / "update_x.pt") << "not ours";
  CheckpointStore store(dir.path());
  CHECK_FALSE(fs::exists(half));
  CHECK(store.updates(kIdentity) == std::vector<uint64_t>{12, 16, 20});
  // A file that is not a checkpoint is refused, naming it.
  std::ofstream(dir.path() / kIdentity / "update_28.pt") << "garbage";
  CHECK_THROWS_WITH(store.read(kIdentity, 28, 0, 2), Catch::Contains("update_28.pt: not a readable"));
  store.clear(kIdentity);
  CHECK(store.updates(kIdentity).empty());
}

TEST_CASE("an identity is lowercase hex, nothing else", "[checkpoint]") {
  test::TempDir dir;
  CheckpointStore store(dir.path() / "checkpoints");
  const std::vector<std::string> bad_ones = {"../../etc",        "",
                                            "abc",              "0123456789ABCDEF",
                                            "01234567/89ab",    std::string(65, 'a'),
                                            std::string("0123456789\0ab", 13)};
  for (const std::string& bad : bad_ones) {
    INFO(bad);
    CHECK_THROWS_WITH(store.updates(bad), Catch::Contains("lowercase hex"));
    CHECK_THROWS(store.clear(bad));
  }
  CHECK(fs::exists(dir.path() / "checkpoints"));
}

TEST_CASE("a symlink in the store is never written through", "[checkpoint]") {
  // Issue 28: a symlinked checkpoints/ directory was written through, outside the data directory.
  test::TempDir dir;
  const fs::path elsewhere = dir / "elsewhere";
  fs::create_directories(elsewhere);
  fs::create_directories(dir / "data");
  fs::create_directory_symlink(elsewhere, dir / "data" / "checkpoints");
  CHECK_THROWS_WITH(CheckpointStore(dir / "data" / "checkpoints"),
                    Catch::Contains("checkpoints is a symlink; ravnestd writes only inside"));
  fs::remove(dir / "data" / "checkpoints");
  CheckpointStore store(dir / "data" / "checkpoints");
  fs::create_directory_symlink(elsewhere, dir / "data" / "checkpoints" / kIdentity);  // later
  CHECK_THROWS_WITH(store.write(sample(4)),
                    Catch::Contains(kIdentity + " is a symlink; ravnestd writes only inside"));
  CHECK(fs::is_empty(elsewhere));
}

TEST_CASE("a directory named as a checkpoint does not stop that checkpoint's write", "[checkpoint]") {
  // Issue 43: a directory named update_N.pt failed the write of update N, so every resume that
  // reached it; a dangling symlink alike. Neither is listed; both give way to the checkpoint.
  test::TempDir dir;
  CheckpointStore store(dir.path());
  store.write(sample(4));
  fs::create_directories(dir.path() / kIdentity / "update_8.pt" / "inside");
  fs::create_symlink(dir / "nowhere", dir.path() / kIdentity / "update_12.pt");
  CHECK(store.updates(kIdentity) == std::vector<uint64_t>{4});
  store.write(sample(8));
  store.write(sample(12));
  CHECK(store.updates(kIdentity) == std::vector<uint64_t>{4, 8, 12});
  CHECK(store.read(kIdentity, 8, 0, 2).batches == 24);
  CHECK(store.read(kIdentity, 12, 0, 2).batches == 36);
  CHECK_FALSE(fs::exists(dir / "nowhere"));
}
