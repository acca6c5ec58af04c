// Checkpoint folders: the one-rank files and the sharded layout, whose
// ranks each write the flat ranges they keep and whose loader assembles
// the whole tensors, with every way a folder can be incomplete reported.
#include "runner/torch/checkpoint.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

using tailor::testing::TempDir;
namespace fs = std::filesystem;

CheckpointTensors rng_only() {
  CheckpointTensors t;
  t.rng_state = at::detail::getDefaultCPUGenerator().get_state();
  return t;
}

// A matrix, an 8-bit code vector and a bf16 vector cut among `ranks` as
// ZeRO-3 would (contiguous flat ranges), plus an undefined optimizer entry.
struct Whole {
  torch::Tensor matrix = torch::randn({6, 5});
  torch::Tensor codes = torch::randint(0, 255, {13}, torch::kUInt8);
  torch::Tensor half = torch::randn({7}).to(torch::kBFloat16);
};

std::vector<ShardPiece> pieces_of(const Whole& w, int rank, int ranks) {
  std::vector<ShardPiece> out;
  auto cut = [&](const std::string& name, const torch::Tensor& t) {
    const std::int64_t n = t.numel(), b = n * rank / ranks, e = n * (rank + 1) / ranks;
    out.push_back({name, t.sizes().vec(), b, t.reshape({-1}).narrow(0, b, e - b)});
  };
  cut("model.0", w.matrix);
  cut("model.1", w.half);
  cut("optimizer.0", w.codes);
  return out;  // optimizer.1: no rank holds it
}

std::string write_sharded(const std::string& dir, const Whole& w, int ranks, std::int64_t step) {
  auto tmp = begin_checkpoint(dir, step);
  EXPECT_TRUE(tmp.is_ok()) << tmp.status().message();
  std::vector<FileSum> sums;  // as the ranks report them to rank 0
  for (int r = 0; r < ranks; ++r) {
    auto sum = write_checkpoint_shard(*tmp, r, ranks, pieces_of(w, r, ranks));
    EXPECT_TRUE(sum.is_ok()) << sum.status().message();
    if (sum.is_ok()) sums.push_back(*sum);
  }
  CheckpointState st;
  st.step = step;
  const ShardLayout layout{ranks, 2, 2};
  EXPECT_TRUE(commit_checkpoint(dir, *tmp, st, rng_only(), &layout, sums, 3).is_ok());
  return *latest_checkpoint(dir);
}

TEST(CheckpointTest, ShardsOfEveryRankAssembleIntoTheWholeTensors) {
  TempDir t;
  const Whole w;
  const std::string folder = write_sharded(t.file("ckpt"), w, 3, 20);
  EXPECT_FALSE(fs::exists(fs::path(folder) / "model.pt"));  // nothing gathered
  EXPECT_TRUE(fs::exists(fs::path(folder) / "rank-00002-of-00003.safetensors"));
  auto loaded = load_checkpoint(folder);
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_EQ(loaded->first.step, 20);
  const CheckpointTensors& c = loaded->second;
  ASSERT_EQ(c.params.size(), 2u);
  ASSERT_EQ(c.optimizer.size(), 2u);
  EXPECT_TRUE(torch::equal(c.params[0], w.matrix));
  EXPECT_TRUE(torch::equal(c.params[1], w.half));
  EXPECT_TRUE(torch::equal(c.optimizer[0], w.codes));
  EXPECT_FALSE(c.optimizer[1].defined());
}

TEST(CheckpointTest, OneRanksFilesStillRoundTrip) {
  TempDir t;
  CheckpointTensors in = rng_only();
  in.params = {torch::randn({3, 4})};
  in.optimizer = {torch::randn({3, 4}), torch::Tensor()};
  CheckpointState st;
  st.step = 5;
  ASSERT_TRUE(save_checkpoint(t.file("ckpt"), st, in, 2).is_ok());
  auto loaded = load_checkpoint(*latest_checkpoint(t.file("ckpt")));
  ASSERT_TRUE(loaded.is_ok()) << loaded.status().message();
  EXPECT_TRUE(torch::equal(loaded->second.params[0], in.params[0]));
  EXPECT_TRUE(torch::equal(loaded->second.optimizer[0], in.optimizer[0]));
  EXPECT_FALSE(loaded->second.optimizer[1].defined());
}

TEST(CheckpointTest, AnIncompleteShardedFolderIsAnErrorNamingWhatIsMissing) {
  TempDir t;
  const Whole w;
  // A rank's file gone.
  const std::string gone = write_sharded(t.file("gone"), w, 2, 10);
  fs::remove(fs::path(gone) / "rank-00001-of-00002.safetensors");
  auto a = load_checkpoint(gone);
  ASSERT_FALSE(a.is_ok());
  EXPECT_NE(a.status().message().find("rank-00001-of-00002.safetensors"), std::string::npos) << a.status().message();
  // A rank that wrote less than its range: the tensor is short, by name.
  const std::string dir = t.file("short");
  auto tmp = begin_checkpoint(dir, 10);
  ASSERT_TRUE(tmp.is_ok());
  ASSERT_TRUE(write_checkpoint_shard(*tmp, 0, 2, pieces_of(w, 0, 2)).is_ok());
  std::vector<ShardPiece> partial = pieces_of(w, 1, 2);
  partial[0].data = partial[0].data.narrow(0, 0, partial[0].data.numel() - 1);
  ASSERT_TRUE(write_checkpoint_shard(*tmp, 1, 2, partial).is_ok());
  CheckpointState st;
  st.step = 10;
  const ShardLayout layout{2, 2, 2};
  ASSERT_TRUE(commit_checkpoint(dir, *tmp, st, rng_only(), &layout, {}, 3).is_ok());
  auto b = load_checkpoint(*latest_checkpoint(dir));
  ASSERT_FALSE(b.is_ok());
  EXPECT_NE(b.status().message().find("model.0 has 29 of its 30 elements"), std::string::npos) << b.status().message();
  // A piece past the end of its tensor.
  const std::string over = t.file("over");
  tmp = begin_checkpoint(over, 10);
  ASSERT_TRUE(tmp.is_ok());
  std::vector<ShardPiece> past = pieces_of(w, 0, 1);
  past[1].begin = 3;
  ASSERT_TRUE(write_checkpoint_shard(*tmp, 0, 2, past).is_ok());
  ASSERT_TRUE(write_checkpoint_shard(*tmp, 1, 2, {}).is_ok());
  ASSERT_TRUE(commit_checkpoint(over, *tmp, st, rng_only(), &layout, {}, 3).is_ok());
  auto c = load_checkpoint(*latest_checkpoint(over));
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("model.1"), std::string::npos) << c.status().message();
  EXPECT_NE(c.status().message().find("outside its 7"), std::string::npos) << c.status().message();
}

TEST(CheckpointTest, AnAbandonedSaveLeavesNoCheckpoint) {
  TempDir t;
  const Whole w;
  const std::string dir = t.file("ckpt");
  const std::string first = write_sharded(dir, w, 2, 10);
  auto tmp = begin_checkpoint(dir, 20);
  ASSERT_TRUE(tmp.is_ok());
  EXPECT_EQ(*tmp, checkpoint_tmp_path(dir, 20));
  ASSERT_TRUE(write_checkpoint_shard(*tmp, 0, 2, pieces_of(w, 0, 2)).is_ok());
  EXPECT_EQ(*latest_checkpoint(dir), first);  // a folder being written is not a checkpoint
  abandon_checkpoint(*tmp);
  EXPECT_FALSE(fs::exists(*tmp));
  EXPECT_EQ(*latest_checkpoint(dir), first);
}

// Overwrites `n` bytes at the middle of `path` with other bytes: the size
// is unchanged, as when a disk or a stray process writes into a file.
void scribble(const std::string& path, std::size_t n) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(0, std::ios::end);
  const auto size = static_cast<std::size_t>(f.tellg());
  ASSERT_GT(size, n);
  std::string bytes(n, '\0');
  f.seekg(static_cast<std::streamoff>((size - n) / 2));
  f.read(bytes.data(), static_cast<std::streamsize>(n));
  for (char& c : bytes) c = static_cast<char>(~c);
  f.seekp(static_cast<std::streamoff>((size - n) / 2));
  f.write(bytes.data(), static_cast<std::streamsize>(n));
}

TEST(CheckpointTest, AFileChangedSinceItWasWrittenIsDataLossNamingIt) {
  TempDir t;
  CheckpointTensors in = rng_only();
  in.params = {torch::randn({64, 64})};
  in.optimizer = {torch::randn({64, 64})};
  CheckpointState st;
  st.step = 5;
  for (const char* file : {"model.pt", "optimizer.pt", "rng.pt"}) {
    const std::string dir = t.file(std::string("one-") + file);
    ASSERT_TRUE(save_checkpoint(dir, st, in, 2).is_ok());
    const std::string folder = *latest_checkpoint(dir);
    ASSERT_TRUE(load_checkpoint(folder).is_ok());
    scribble(folder + "/" + file, 64);
    auto loaded = load_checkpoint(folder);
    ASSERT_FALSE(loaded.is_ok()) << file;
    EXPECT_EQ(loaded.status().code(), StatusCode::kDataLoss);
    EXPECT_NE(loaded.status().message().find(std::string(file) + " is damaged"), std::string::npos)
        << loaded.status().message();
  }
  // Truncated, and gone.
  const std::string dir = t.file("cut");
  ASSERT_TRUE(save_checkpoint(dir, st, in, 2).is_ok());
  const std::string folder = *latest_checkpoint(dir);
  fs::resize_file(folder + "/optimizer.pt", 100);
  EXPECT_EQ(load_checkpoint(folder).status().code(), StatusCode::kDataLoss);
  fs::remove(folder + "/rng.pt");
  auto gone = load_checkpoint(folder);
  EXPECT_EQ(gone.status().code(), StatusCode::kDataLoss);
  // Sharded: a rank's file.
  const Whole w;
  const std::string sharded = write_sharded(t.file("sharded"), w, 2, 10);
  ASSERT_TRUE(load_checkpoint(sharded).is_ok());
  scribble(sharded + "/rank-00001-of-00002.safetensors", 8);
  auto bad = load_checkpoint(sharded);
  EXPECT_EQ(bad.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(bad.status().message().find("rank-00001-of-00002.safetensors is damaged"), std::string::npos)
      << bad.status().message();
}

TEST(CheckpointTest, ADamagedCheckpointSetAsideIsNeitherListedNorPruned) {
  TempDir t;
  const Whole w;
  const std::string dir = t.file("ckpt");
  const std::string ten = write_sharded(dir, w, 2, 10);
  const std::string twenty = write_sharded(dir, w, 2, 20);
  EXPECT_EQ(checkpoints_newest_first(dir), (std::vector<std::string>{twenty, ten}));
  auto aside = set_aside_checkpoint(twenty);
  ASSERT_TRUE(aside.is_ok()) << aside.status().message();
  EXPECT_EQ(fs::path(*aside).filename(), "damaged-step-000020");
  EXPECT_EQ(checkpoints_newest_first(dir), (std::vector<std::string>{ten}));
  // keep 3: steps 10, 30, 40, 50 -> 30, 40, 50; the damaged one stays aside.
  for (int step : {30, 40, 50}) write_sharded(dir, w, 2, step);
  EXPECT_EQ(checkpoints_newest_first(dir).size(), 3u);
  EXPECT_TRUE(fs::exists(*aside));
}

}  // namespace
}  // namespace tailor::runner
