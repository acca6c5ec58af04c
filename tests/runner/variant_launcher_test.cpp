// tailor-runner as a CUDA build installs it: a launcher that runs
// tailor-runner-cuda or tailor-runner-cpu from beside itself.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "platform/process.h"
#include "runner/variant_choice.h"
#include "tests/testing/temp_dir.h"

namespace tailor::runner {
namespace {

namespace fs = std::filesystem;
using testing::TempDir;

struct Ran {
  int code = -1;
  std::string out;  // stdout and stderr
};

Ran run(const fs::path& program, const std::vector<std::string>& args, const std::map<std::string, std::string>& env,
        const TempDir& dir) {
  platform::LaunchRequest req;
  req.argv = {program.string()};
  req.argv.insert(req.argv.end(), args.begin(), args.end());
  req.env = env;
  req.log_path = dir.file("out-" + std::to_string(std::hash<std::string>{}(program.string() + args[0])) + ".log");
  fs::remove(req.log_path);
  auto child = platform::launch_process(req);
  EXPECT_TRUE(child.is_ok()) << child.status().to_string();
  if (!child.is_ok()) return {};
  auto exit = platform::wait_child(child->pid);
  std::ifstream log(req.log_path);
  std::stringstream text;
  text << log.rdbuf();
  return {exit.is_ok() ? exit->code : -1, text.str()};
}

fs::path bin() { return fs::path(TAILOR_BINARY_DIR) / "bin"; }

bool builds_installed() { return fs::exists(bin() / "tailor-runner-cuda") && fs::exists(bin() / "tailor-runner-cpu"); }

TEST(VariantLauncherTest, RunsTheBuildTheVariableOrTheDriverChooses) {
  if (!builds_installed()) GTEST_SKIP() << "a build without CUDA: tailor-runner is the runner itself";
  TempDir dir;
  const fs::path runner = bin() / "tailor-runner";
  const Ran cuda = run(runner, {"--version"}, {{kVariantEnv, "cuda"}}, dir);
  EXPECT_EQ(cuda.code, 0) << cuda.out;
  EXPECT_EQ(cuda.out, "tailor-runner 0.1.0 (CUDA build)\n");
  const Ran cpu = run(runner, {"--version"}, {{kVariantEnv, "cpu"}}, dir);
  EXPECT_EQ(cpu.code, 0) << cpu.out;
  EXPECT_EQ(cpu.out, "tailor-runner 0.1.0 (CPU-only build)\n");

  // Unset, the driver decides: this test process asks the loader the same.
  const bool driver = ::dlopen(kCudaDriverLibrary, RTLD_LAZY | RTLD_LOCAL) != nullptr;
  const Ran automatic = run(runner, {"--version"}, {{kVariantEnv, ""}}, dir);
  EXPECT_EQ(automatic.code, 0) << automatic.out;
  EXPECT_EQ(automatic.out, driver ? cuda.out : cpu.out);
}

TEST(VariantLauncherTest, ABadVariableOrAMissingBuildIsACleanError) {
  if (!builds_installed()) GTEST_SKIP() << "a build without CUDA";
  TempDir dir;
  const Ran bad = run(bin() / "tailor-runner", {"--version"}, {{kVariantEnv, "gpu"}}, dir);
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_EQ(bad.out, "tailor-runner: TAILOR_RUNNER_VARIANT: expected auto, cuda or cpu, got 'gpu'\n");

  // The launcher alone, without the builds beside it.
  const fs::path alone = dir.path() / "bin" / "tailor-runner";
  fs::create_directories(alone.parent_path());
  fs::copy_file(bin() / "tailor-runner", alone);
  const Ran missing = run(alone, {"--version"}, {{kVariantEnv, "cpu"}}, dir);
  EXPECT_EQ(missing.code, 127) << missing.out;
  EXPECT_NE(missing.out.find("cannot run " + (alone.parent_path() / "tailor-runner-cpu").string()), std::string::npos)
      << missing.out;
  EXPECT_NE(missing.out.find("the runner's CPU-only build belongs beside tailor-runner"), std::string::npos)
      << missing.out;
}

}  // namespace
}  // namespace tailor::runner
