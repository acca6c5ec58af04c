// tailord's configuration: flags over environment over file, errors
// naming their source, the Slurm executor's settings.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>

#include "daemon/config.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon {
namespace {

TEST(ConfigTest, FlagsOverrideEnvironmentOverrideFile) {
  tailor::testing::TempDir dir;
  const std::string file = dir.write("tailord.yaml", "data_dir: /from/file\nlisten: 127.0.0.1:1\nallowed_hosts: [a, b]\n");
  bool help = false;
  auto c = load_config({"--config", file, "--listen", "127.0.0.1:3"},
                       {{"TAILORD_LISTEN", "127.0.0.1:2"}, {"TAILORD_MAX_BODY", "2MiB"}}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->data_dir, "/from/file");
  EXPECT_EQ(c->listen, "127.0.0.1:3");
  EXPECT_EQ(c->max_body_bytes, 2 << 20);
  EXPECT_EQ(c->allowed_hosts, (std::vector<std::string>{"a", "b"}));
}

TEST(ConfigTest, TheStreamBudgetIsReadFromFlagsFileAndEnvironmentAndChecked) {
  tailor::testing::TempDir dir;
  bool help = false;
  const std::string file = dir.write("tailord.yaml", "data_dir: /d\nmax_streams: 40\n");
  auto c = load_config({"--config", file, "--max-streams-per-token", "9"}, {}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->max_streams, 40);
  EXPECT_EQ(c->max_streams_per_token, 9);
  c = load_config({"--data-dir", "/d"}, {{"TAILORD_MAX_STREAMS", "0"}}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("TAILORD_MAX_STREAMS"), std::string::npos) << c.status().message();
  c = load_config({"--data-dir", "/d"}, {}, help);
  ASSERT_TRUE(c.is_ok());
  EXPECT_EQ(c->max_streams, 256);
  EXPECT_EQ(c->max_streams_per_token, 128);
}

// The cache folder's limit: unset (never pruned) unless given, a size from
// a flag, the environment or the file, positive.
TEST(ConfigTest, TheCacheLimitIsASizeAndOffUnlessGiven) {
  tailor::testing::TempDir dir;
  bool help = false;
  auto c = load_config({"--data-dir", "/d"}, {}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_FALSE(c->cache_max_size.has_value());
  c = load_config({"--data-dir", "/d", "--cache-max-size", "20GiB"}, {}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->cache_max_size, Bytes::gib(20));
  const std::string file = dir.write("tailord.yaml", "data_dir: /d\ncache_max_size: 512MiB\n");
  c = load_config({"--config", file}, {}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->cache_max_size, Bytes::mib(512));
  for (const char* bad : {"0", "lots", "-1GiB"}) {
    c = load_config({"--data-dir", "/d"}, {{"TAILORD_CACHE_MAX_SIZE", bad}}, help);
    ASSERT_FALSE(c.is_ok()) << bad;
    EXPECT_NE(c.status().message().find("TAILORD_CACHE_MAX_SIZE"), std::string::npos) << c.status().message();
  }
}

// The submission workers apart from the I/O threads: read from a flag or
// the environment, 16 unless set, at least 1.
TEST(ConfigTest, WorkersAreReadApartFromTheHttpThreadsAndChecked) {
  bool help = false;
  auto c = load_config({"--data-dir", "/d"}, {}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->workers, 16);
  EXPECT_EQ(c->http_threads, 2);
  c = load_config({"--data-dir", "/d", "--workers", "4"}, {{"TAILORD_HTTP_THREADS", "3"}}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->workers, 4);
  EXPECT_EQ(c->http_threads, 3);
  c = load_config({"--data-dir", "/d"}, {{"TAILORD_WORKERS", "0"}}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("TAILORD_WORKERS"), std::string::npos) << c.status().message();
}

// The trackers tailord turns on for jobs that leave them unset, from a
// flag, the environment or the file; a URI that is not http(s) is refused.
TEST(ConfigTest, TrackerDefaultsAreReadAndChecked) {
  tailor::testing::TempDir dir;
  bool help = false;
  const std::string file = dir.write("tailord.yaml", "data_dir: /d\nmlflow_uri: http://127.0.0.1:5000\n");
  auto c = load_config({"--config", file, "--tensorboard", "true"}, {{"TAILORD_MLFLOW_EXPERIMENT", "team"}}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_TRUE(c->tracking.tensorboard.on());
  EXPECT_TRUE(c->tracking.mlflow.on());
  EXPECT_EQ(c->tracking.mlflow.uri, "http://127.0.0.1:5000");
  EXPECT_EQ(c->tracking.mlflow.experiment, "team");
  c = load_config({"--data-dir", "/d"}, {}, help);
  ASSERT_TRUE(c.is_ok());
  EXPECT_FALSE(c->tracking.any());
  c = load_config({"--data-dir", "/d", "--mlflow-uri", "mlflow.internal:5000"}, {}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("--mlflow-uri"), std::string::npos) << c.status().message();
}

TEST(ConfigTest, ErrorsNameTheSource) {
  tailor::testing::TempDir dir;
  bool help = false;
  auto c = load_config({"--data-dir", "/d"}, {{"TAILORD_CANCEL_GRACE", "soon"}}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("TAILORD_CANCEL_GRACE"), std::string::npos);
  const std::string file = dir.write("bad.yaml", "data_dir: /d\nlisten_port: 3\n");
  c = load_config({"--config", file}, {}, help);
  ASSERT_FALSE(c.is_ok());
  EXPECT_NE(c.status().message().find("bad.yaml:2:1"), std::string::npos) << c.status().message();
  EXPECT_FALSE(load_config({}, {}, help).is_ok());  // no data dir
}

TEST(ConfigTest, TheSlurmExecutorsSettingsAreReadAndChecked) {
  tailor::testing::TempDir dir;
  const std::string file = dir.write("tailord.yaml",
                                     "data_dir: /d\nexecutor: auto\nslurm_partition: gpu\nslurm_time_limit: 1-12:00\n"
                                     "slurm_options: [--exclusive, \"--constraint=a100,h100\"]\n");
  bool help = false;
  auto c = load_config({"--config", file, "--slurm-account", "ml"}, {{"TAILORD_SLURM_QOS", "high"}}, help);
  ASSERT_TRUE(c.is_ok()) << c.status().to_string();
  EXPECT_EQ(c->executor, dsl::ExecutorKind::kAuto);
  EXPECT_EQ(c->slurm.partition, "gpu");
  EXPECT_EQ(c->slurm.account, "ml");
  EXPECT_EQ(c->slurm.qos, "high");
  EXPECT_EQ(c->slurm.time_limit, "1-12:00");
  EXPECT_EQ(c->slurm.sbatch_options, (std::vector<std::string>{"--exclusive", "--constraint=a100,h100"}));
  auto bad = load_config({"--data-dir", "/d", "--executor", "kubernetes"}, {}, help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--executor: expected local, slurm or auto"), std::string::npos);
  bad = load_config({"--data-dir", "/d", "--slurm-time-limit", "2h"}, {}, help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("--slurm-time-limit"), std::string::npos);
  // Options Tailor sets itself cannot be overridden: its tag, its folders.
  bad = load_config({"--data-dir", "/d", "--slurm-options", "--exclusive --comment=x"}, {}, help);
  ASSERT_FALSE(bad.is_ok());
  EXPECT_NE(bad.status().message().find("Tailor sets --comment itself"), std::string::npos) << bad.status().message();
}

}  // namespace
}  // namespace tailor::daemon
