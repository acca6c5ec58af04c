// The calibration store on a real SQLite file: records by key, the factors
// of a key, reset, another process' view, and where the default file is.
#include "platform/calibration_store.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>

#include "platform/sqlite.h"
#include "tests/testing/temp_dir.h"

namespace tailor::platform {
namespace {

using tailor::testing::TempDir;

CalibrationRecord record(const std::string& machine, double predicted_peak, double measured_peak) {
  return {{machine, "tailor", "llama"},
          "probe",
          "bf16, micro-batch 8, adamw",
          {predicted_peak, measured_peak, 100, 150},
          {}};
}

TEST(CalibrationStoreTest, KeepsRecordsByKeyAndFitsTheirFactors) {
  TempDir dir;
  const std::string path = dir.file("nested/folder/calibration.db");
  {
    auto store = CalibrationStore::open(path);
    ASSERT_TRUE(store.is_ok()) << store.status().to_string();
    ASSERT_TRUE(store->add(record("NVIDIA H200", 100, 110)).is_ok());
    ASSERT_TRUE(store->add(record("NVIDIA H200", 100, 130)).is_ok());
    ASSERT_TRUE(store->add(record("NVIDIA H200", 100, 120)).is_ok());
    ASSERT_TRUE(store->add(record("cpu", 100, 300)).is_ok());
  }
  // Another connection (another process' view) reads what was written.
  auto store = CalibrationStore::open(path);
  ASSERT_TRUE(store.is_ok());
  auto all = store->records();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 4u);
  EXPECT_EQ(all->front().source, "probe");
  EXPECT_FALSE(all->front().recorded_at.empty());
  const strategies::CalibrationKey h200{"NVIDIA H200", "tailor", "llama"};
  auto c = store->calibration(h200);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->runs, 3);
  EXPECT_DOUBLE_EQ(c->memory, 1.2);
  EXPECT_DOUBLE_EQ(c->speed, 1.5);
  EXPECT_EQ(c->key, "NVIDIA H200 / tailor / llama");
  // Another family on the same machine has nothing yet.
  EXPECT_EQ(store->calibration({"NVIDIA H200", "tailor", "qwen2"})->runs, 0);
  const auto loaded = load_calibration(path, h200);
  ASSERT_TRUE(loaded.has_value());
  EXPECT_EQ(loaded->runs, 3);
  // Reset one machine, then everything.
  EXPECT_EQ(*store->reset(std::string("cpu")), 1);
  EXPECT_EQ(store->records()->size(), 3u);
  EXPECT_EQ(*store->reset(), 3);
  EXPECT_TRUE(store->records()->empty());
  EXPECT_FALSE(load_calibration(path, h200).has_value());
}

// A store written before contention was recorded opens as it was, its
// records as measured on an idle machine; busy records keep their share.
TEST(CalibrationStoreTest, AStoreFromBeforeContentionGainsItAndBusySpeedsAreLeftOut) {
  TempDir dir;
  const std::string path = dir.file("calibration.db");
  {
    auto db = Database::open(path);
    ASSERT_TRUE(db.is_ok());
    ASSERT_TRUE(db->exec("CREATE TABLE calibration (id INTEGER PRIMARY KEY, machine TEXT NOT NULL, runtime TEXT NOT "
                         "NULL, family TEXT NOT NULL, source TEXT NOT NULL, summary TEXT NOT NULL, predicted_peak REAL "
                         "NOT NULL, measured_peak REAL NOT NULL, predicted_tokens_per_second REAL NOT NULL, "
                         "measured_tokens_per_second REAL NOT NULL, recorded_at TEXT NOT NULL);"
                         "INSERT INTO calibration (machine, runtime, family, source, summary, predicted_peak, "
                         "measured_peak, predicted_tokens_per_second, measured_tokens_per_second, recorded_at) VALUES "
                         "('cpu', 'tailor', 'llama', 'job', 'fp32', 100, 110, 100, 200, '2026-12-01T00:00:00Z')")
                    .is_ok());
  }
  auto store = CalibrationStore::open(path);
  ASSERT_TRUE(store.is_ok()) << store.status().to_string();
  CalibrationRecord busy = record("cpu", 100, 130);
  busy.sample.measured_tokens_per_second = 20;
  busy.sample.contention = 0.8;
  ASSERT_TRUE(store->add(busy).is_ok());
  const auto all = store->records();
  ASSERT_TRUE(all.is_ok());
  ASSERT_EQ(all->size(), 2u);
  EXPECT_DOUBLE_EQ((*all)[0].sample.contention, 0);
  EXPECT_DOUBLE_EQ((*all)[1].sample.contention, 0.8);
  const auto c = store->calibration({"cpu", "tailor", "llama"});
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->runs, 2);
  EXPECT_EQ(c->busy, 1);
  EXPECT_DOUBLE_EQ(c->speed, 2.0) << "the idle run's alone";
  EXPECT_DOUBLE_EQ(c->memory, 1.2) << "both peaks";
  // Opening it again finds the column there.
  EXPECT_TRUE(CalibrationStore::open(path).is_ok());
}

TEST(CalibrationStoreTest, APlannerReadsNothingWhereNothingWasMeasuredOrTheFileIsNoStore) {
  TempDir dir;
  std::string why;
  EXPECT_FALSE(load_calibration(dir.file("absent.db"), {"cpu", "tailor", "llama"}, &why).has_value());
  EXPECT_TRUE(why.empty()) << why;
  EXPECT_FALSE(std::filesystem::exists(dir.file("absent.db"))) << "reading must not create the store";
  const std::string junk = dir.write("junk.db", "this is not a database, it is a text file of some length\n");
  EXPECT_FALSE(load_calibration(junk, {"cpu", "tailor", "llama"}, &why).has_value());
  EXPECT_FALSE(why.empty());
}

TEST(CalibrationStoreTest, TheDefaultFileFollowsTheEnvironment) {
  const char* saved = std::getenv("TAILOR_CALIBRATION");
  const std::string keep = saved ? saved : "";
  ::setenv("TAILOR_CALIBRATION", "/some/where.db", 1);
  EXPECT_EQ(default_calibration_path(), "/some/where.db");
  ::setenv("TAILOR_CALIBRATION", "none", 1);
  EXPECT_EQ(default_calibration_path(), "");
  ::unsetenv("TAILOR_CALIBRATION");
  ::setenv("XDG_DATA_HOME", "/xdg", 1);
  EXPECT_EQ(default_calibration_path(), "/xdg/tailor/calibration.db");
  ::unsetenv("XDG_DATA_HOME");
  if (saved) ::setenv("TAILOR_CALIBRATION", keep.c_str(), 1);
}

}  // namespace
}  // namespace tailor::platform
