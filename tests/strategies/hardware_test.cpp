#include "strategies/hardware.h"

#include <gtest/gtest.h>

namespace tailor::strategies {
namespace {

const dsl::Catalog& cat() { return dsl::Catalog::builtin(); }

TEST(HardwareTest, ParsesCountTimesCatalogGpu) {
  auto d = parse_gpus_flag("2xA6000", cat());
  ASSERT_TRUE(d.is_ok()) << d.status().to_string();
  ASSERT_EQ(d->size(), 2u);
  EXPECT_EQ((*d)[0].catalog_key, "A6000");
  EXPECT_EQ((*d)[0].memory, Bytes::gib(48));
  EXPECT_TRUE((*d)[0].bf16);
  EXPECT_EQ(parse_gpus_flag("A100-80", cat())->size(), 1u);
  EXPECT_EQ(parse_gpus_flag("4xh100-80", cat())->front().catalog_key, "H100-80");
}

TEST(HardwareTest, ParsesHypotheticalMemoryAndCpu) {
  auto d = parse_gpus_flag("1x24GiB", cat());
  ASSERT_TRUE(d.is_ok());
  EXPECT_EQ(d->front().memory, Bytes::gib(24));
  EXPECT_TRUE(parse_gpus_flag("0", cat())->empty());
  EXPECT_TRUE(parse_gpus_flag("cpu", cat())->empty());
}

TEST(HardwareTest, RejectsUnknownGpusWithASuggestion) {
  auto d = parse_gpus_flag("2xA600", cat());
  ASSERT_FALSE(d.is_ok());
  EXPECT_NE(d.status().message().find("did you mean 'A6000'?"), std::string::npos) << d.status().message();
  EXPECT_FALSE(parse_gpus_flag("0xA6000", cat()).is_ok());
  EXPECT_FALSE(parse_gpus_flag("2x4096", cat()).is_ok());  // a bare number is not a size
  // ... but it may be a model number: 4090 is the RTX 4090.
  auto rtx = parse_gpus_flag("2x4090", cat());
  ASSERT_TRUE(rtx.is_ok()) << rtx.status().message();
  EXPECT_EQ(rtx->size(), 2u);
  EXPECT_EQ(rtx->front().memory, Bytes::gib(24));
}

TEST(HardwareTest, FlagWinsOverSpecWhichWinsOverDetection) {
  dsl::JobSpec spec;
  spec.resources.gpu_model = "T4";
  spec.resources.gpu_count = 2;
  const std::vector<Device> detected = {hypothetical_gpu(Bytes::gib(80))};
  auto from_spec = resolve_hardware(spec, std::nullopt, detected, Bytes::gib(64), cat());
  ASSERT_TRUE(from_spec.is_ok());
  EXPECT_EQ(from_spec->gpu_count(), 2);
  EXPECT_EQ(from_spec->gpus[0].catalog_key, "T4");
  auto from_flag = resolve_hardware(spec, std::string("1xH100-80"), detected, Bytes::gib(64), cat());
  EXPECT_EQ(from_flag->gpus[0].catalog_key, "H100-80");
  dsl::JobSpec plain;
  auto detected_hw = resolve_hardware(plain, std::nullopt, detected, Bytes::gib(64), cat());
  EXPECT_EQ(detected_hw->gpus[0].memory, Bytes::gib(80));
  EXPECT_EQ(detected_hw->host_memory, Bytes::gib(64));
}

// Declared GPUs come with their host's RAM when something says it (host=
// on --gpus, then resources.host_memory); otherwise this machine's stands
// in, and the description says so.
TEST(HardwareTest, DeclaredHardwareTakesItsHostMemoryOrSaysItBorrowsThisMachines) {
  dsl::JobSpec spec;
  auto flag = resolve_hardware(spec, std::string("8xH100,host=1TiB"), {}, Bytes::gib(24), cat());
  ASSERT_TRUE(flag.is_ok()) << flag.status().message();
  EXPECT_EQ(flag->gpus.size(), 8u);
  EXPECT_EQ(flag->host_memory, Bytes::gib(1024));
  EXPECT_FALSE(flag->host_memory_assumed);
  EXPECT_EQ(flag->describe().find("this machine's"), std::string::npos);

  auto borrowed = resolve_hardware(spec, std::string("8xH100"), {}, Bytes::gib(24), cat());
  ASSERT_TRUE(borrowed.is_ok());
  EXPECT_EQ(borrowed->host_memory, Bytes::gib(24));
  EXPECT_TRUE(borrowed->host_memory_assumed);
  EXPECT_NE(borrowed->describe().find("host 24.0 GiB (this machine's"), std::string::npos) << borrowed->describe();

  spec.resources.host_memory = Bytes::gib(512);
  auto from_spec = resolve_hardware(spec, std::string("8xH100"), {}, Bytes::gib(24), cat());
  ASSERT_TRUE(from_spec.is_ok());
  EXPECT_EQ(from_spec->host_memory, Bytes::gib(512));
  EXPECT_FALSE(from_spec->host_memory_assumed);

  // Detected GPUs are this machine's, and so is its RAM.
  auto detected = resolve_hardware(dsl::JobSpec{}, std::nullopt, {hypothetical_gpu(Bytes::gib(80))}, Bytes::gib(24), cat());
  ASSERT_TRUE(detected.is_ok());
  EXPECT_FALSE(detected->host_memory_assumed);

  for (const char* bad : {"8xH100,hots=1TiB", "8xH100,host=", "8xH100,host=lots"}) {
    auto r = resolve_hardware(dsl::JobSpec{}, std::string(bad), {}, Bytes::gib(24), cat());
    ASSERT_FALSE(r.is_ok()) << bad;
    EXPECT_NE(r.status().message().find("is neither host=SIZE nor nodes=N"), std::string::npos) << r.status().message();
  }
}

// Several nodes: the GPU count and host RAM are per node, on the flag and
// in resources; this machine never stands for more than one node.
TEST(HardwareTest, NodesMultiplyTheGpusAndKeepHostMemoryPerNode) {
  auto two = resolve_hardware(dsl::JobSpec{}, std::string("8xH100,host=1TiB,nodes=2"), {}, Bytes::gib(24), cat());
  ASSERT_TRUE(two.is_ok()) << two.status().message();
  EXPECT_EQ(two->nodes, 2);
  EXPECT_EQ(two->gpu_count(), 16);
  EXPECT_EQ(two->gpus_per_node(), 8);
  EXPECT_EQ(two->host_memory, Bytes::gib(1024));
  EXPECT_NE(two->describe().find("2 nodes x 8x"), std::string::npos) << two->describe();
  EXPECT_NE(two->describe().find("per node"), std::string::npos) << two->describe();

  dsl::JobSpec spec;
  spec.resources.nodes = 4;
  spec.resources.gpu_count = 2;
  spec.resources.gpu_model = "A100-80GB";
  spec.resources.host_memory = Bytes::gib(256);
  auto four = resolve_hardware(spec, std::nullopt, {}, Bytes::gib(24), cat());
  ASSERT_TRUE(four.is_ok()) << four.status().message();
  EXPECT_EQ(four->gpu_count(), 8);
  EXPECT_EQ(four->host_memory, Bytes::gib(256));

  dsl::JobSpec undeclared;
  undeclared.resources.nodes = 2;
  auto mine = resolve_hardware(undeclared, std::nullopt, {hypothetical_gpu(Bytes::gib(80))}, Bytes::gib(24), cat());
  ASSERT_FALSE(mine.is_ok());
  EXPECT_NE(mine.status().message().find("this machine's stand for one node only"), std::string::npos);
  for (const char* bad : {"8xH100,nodes=0", "8xH100,nodes=two", "cpu,nodes=2"}) {
    EXPECT_FALSE(resolve_hardware(dsl::JobSpec{}, std::string(bad), {}, Bytes::gib(24), cat()).is_ok()) << bad;
  }
}

TEST(HardwareTest, GpuMemoryOverridesTheModelsFigure) {
  dsl::JobSpec spec;
  spec.resources.gpu_model = "A100-80";
  spec.resources.gpu_memory = Bytes::gib(40);
  auto hw = resolve_hardware(spec, std::nullopt, {}, std::nullopt, cat());
  ASSERT_TRUE(hw.is_ok());
  EXPECT_EQ(hw->gpus[0].memory, Bytes::gib(40));
  EXPECT_EQ(hw->gpus[0].peak_tflops_bf16, cat().find_gpu("A100-80")->peak_tflops_bf16);
}

TEST(HardwareTest, NoGpusMeansCpuTrainingWithHostMemory) {
  dsl::JobSpec spec;
  auto hw = resolve_hardware(spec, std::nullopt, {}, Bytes::gib(24), cat());
  ASSERT_TRUE(hw.is_ok());
  EXPECT_TRUE(hw->cpu_only());
  EXPECT_EQ(hw->host_memory, Bytes::gib(24));
  spec.resources.gpu_count = 4;
  EXPECT_FALSE(resolve_hardware(spec, std::nullopt, {}, Bytes::gib(24), cat()).is_ok());
}

}  // namespace
}  // namespace tailor::strategies
