// The Slurm executor's pure parts: what Slurm 22.05 prints (lines taken from
// a real cluster, tests/testing/slurm_cluster.py), the state mapping, the
// batch script (checked by bash -n), how ranks spread over nodes, and a
// spec placed on a partition's nodes with the shortfall when it does not
// fit. The executor against a real cluster: tests/daemon/executor/slurm_executor_test.py.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>

#include "daemon/executor/batch_script.h"
#include "daemon/executor/slurm_text.h"
#include "daemon/planning/job_planning.h"
#include "dsl/catalog.h"
#include "dsl/spec_loader.h"
#include "tests/testing/temp_dir.h"

namespace tailor::daemon::slurm {
namespace {

const char* const kNodes =
    "NodeName=n1 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 CPULoad=1.09 "
    "AvailableFeatures=(null) ActiveFeatures=(null) Gres=gpu:1 NodeAddr=127.0.0.1 NodeHostName=vm Port=54635 "
    "Version=22.05.8 OS=Linux 6.18.44-fc-v782 #1 SMP PREEMPT_DYNAMIC @0  RealMemory=4000 AllocMem=0 FreeMem=22465 "
    "Sockets=2 Boards=1 State=IDLE ThreadsPerCore=1 TmpDisk=0 Weight=1 Owner=N/A MCS_label=N/A Partitions=debug  "
    "BootTime=2026-11-25T15:22:45 CfgTRES=cpu=2,mem=4000M,billing=2 AllocTRES= CapWatts=n/a\n"
    "NodeName=n2 Arch=x86_64 CoresPerSocket=1  CPUAlloc=0 CPUEfctv=2 CPUTot=2 Gres=gpu:a100:2(S:0-1) "
    "NodeAddr=10.0.0.2 RealMemory=3000 State=MIXED Partitions=debug,gpu\n"
    "NodeName=n3 CPUTot=8 Gres=(null) NodeAddr=10.0.0.3 RealMemory=64000 State=DOWN* Partitions=debug\n";

const char* const kPartitions =
    "PartitionName=debug AllowGroups=ALL AllowAccounts=ALL AllowQos=ALL AllocNodes=ALL Default=YES QoS=N/A "
    "DefaultTime=NONE MaxNodes=UNLIMITED MaxTime=UNLIMITED MinNodes=0 Nodes=n[1-3] State=UP TotalCPUs=12 "
    "TotalNodes=3\n"
    "PartitionName=gpu Default=NO MaxNodes=1 MaxTime=1-00:00:00 Nodes=n2 State=UP\n";

TEST(SlurmTextTest, ScontrolFieldsKeepValuesWithSpacesAndEmptyOnes) {
  const auto f = scontrol_fields("JobId=7 Reason=ReqNodeNotAvail, UnavailableNodes:n3 Comment=j-1/2  AllocTRES= X=1");
  EXPECT_EQ(f.at("JobId"), "7");
  EXPECT_EQ(f.at("Reason"), "ReqNodeNotAvail, UnavailableNodes:n3");
  EXPECT_EQ(f.at("Comment"), "j-1/2");
  EXPECT_EQ(f.at("AllocTRES"), "");
  EXPECT_EQ(f.at("X"), "1");
}

TEST(SlurmTextTest, AJobsStateDescribesWhereItIs) {
  Job j;
  j.state = "FAILED";
  j.exit_code = 3;
  EXPECT_EQ(j.phase(), Phase::kEnded);
  EXPECT_EQ(j.describe(), "FAILED (exit 3)");
  j.state = "CANCELLED by 0";
  j.exit_code = 0;
  j.exit_signal = 15;
  EXPECT_EQ(j.describe(), "CANCELLED by 0 (signal 15)");
  j.state = "PENDING";
  j.reason = "None";
  EXPECT_EQ(j.describe(), "PENDING");
}

TEST(SlurmTextTest, SqueueAndSacctLinesAreRead) {
  const auto q = parse_squeue("12|j-a/1|PENDING|Resources|\n13|(null)|RUNNING|None|n[1-2]\n\ngarbage\n");
  ASSERT_EQ(q.size(), 2u);
  EXPECT_EQ(q[0].describe(), "PENDING (Resources)");
  EXPECT_EQ(q[1].comment, "");
  EXPECT_EQ(q[1].describe(), "RUNNING on n[1-2]");
  // Steps (ID.batch) are not the job; a reused id's last record counts.
  auto s = parse_sacct("5|COMPLETED|0:0|n1\n5.batch|COMPLETED|0:0|n1\n5|CANCELLED by 0|0:15|n2\n", "5");
  ASSERT_TRUE(s);
  EXPECT_EQ(s->state, "CANCELLED by 0");
  EXPECT_EQ(s->exit_signal, 15);
  EXPECT_EQ(tailor_state_name(s->state), "cancelled");
  EXPECT_FALSE(parse_sacct("", "5"));
}

TEST(SlurmTextTest, EveryStateHasATailorName) {
  EXPECT_EQ(tailor_state_name("PENDING"), "pending");
  EXPECT_EQ(tailor_state_name("CONFIGURING"), "pending");
  EXPECT_EQ(tailor_state_name("RUNNING"), "running");
  EXPECT_EQ(tailor_state_name("COMPLETING"), "running");  // its ranks may still write
  EXPECT_EQ(tailor_state_name("COMPLETED"), "completed");
  EXPECT_EQ(tailor_state_name("FAILED"), "failed");
  EXPECT_EQ(tailor_state_name("OUT_OF_MEMORY"), "failed");
  EXPECT_EQ(tailor_state_name("TIMEOUT"), "timeout");
  EXPECT_EQ(tailor_state_name("DEADLINE"), "timeout");
  EXPECT_EQ(tailor_state_name("NODE_FAIL"), "node_fail");
  EXPECT_EQ(tailor_state_name("BOOT_FAIL"), "node_fail");
  EXPECT_EQ(tailor_state_name("PREEMPTED"), "preempted");
  EXPECT_EQ(tailor_state_name("VANISHED"), "failed");
}

TEST(SlurmTextTest, APartitionHasItsNodesWithGpusMemoryAndUsability) {
  auto p = parse_partition(kPartitions, kNodes, "");
  ASSERT_TRUE(p.is_ok()) << p.status().to_string();
  EXPECT_EQ(p->name, "debug");  // the default
  ASSERT_EQ(p->nodes.size(), 3u);
  EXPECT_EQ(p->nodes[0].gpus, 1);
  EXPECT_EQ(p->nodes[0].addr, "127.0.0.1");
  EXPECT_EQ(p->nodes[1].gpus, 2);
  EXPECT_EQ(p->nodes[1].gpu_type, "a100");
  EXPECT_EQ(p->nodes[1].memory_mib, 3000);
  EXPECT_FALSE(p->nodes[2].usable());  // DOWN*
  EXPECT_EQ(p->usable_nodes().size(), 2u);
  EXPECT_NE(p->describe().find("2 usable node(s) (n1, n2) x 1 GPU, 2 CPUs"), std::string::npos) << p->describe();
  auto gpu = parse_partition(kPartitions, kNodes, "gpu");
  ASSERT_TRUE(gpu.is_ok());
  EXPECT_EQ(gpu->max_nodes, 1);
  EXPECT_EQ(gpu->nodes.size(), 1u);
  auto none = parse_partition(kPartitions, kNodes, "big");
  ASSERT_FALSE(none.is_ok());
  EXPECT_NE(none.status().message().find("partitions: debug, gpu"), std::string::npos);
}

TEST(BatchScriptTest, RanksSpreadOverAsFewNodesAsHoldThem) {
  BatchJob b;
  lay_out_ranks(2, 2, 1, b);  // one GPU a node: two nodes
  EXPECT_EQ(b.nodes, 2);
  EXPECT_EQ(b.tasks_per_node, 1);
  EXPECT_EQ(b.gpus_per_node, 1);
  lay_out_ranks(2, 2, 4, b);  // both fit on one node of four GPUs
  EXPECT_EQ(b.nodes, 1);
  EXPECT_EQ(b.tasks_per_node, 2);
  lay_out_ranks(16, 2, 8, b);
  EXPECT_EQ(b.nodes, 2);
  EXPECT_EQ(b.gpus_per_node, 8);
  lay_out_ranks(3, 1, 0, b);  // CPU ranks share one node
  EXPECT_EQ(b.nodes, 1);
  EXPECT_EQ(b.tasks_per_node, 3);
  EXPECT_EQ(b.gpus_per_node, 0);
  EXPECT_EQ(b.ranks, 3);
}

TEST(BatchScriptTest, TheScriptTagsTheAttemptAndIsValidBash) {
  BatchJob b;
  b.tailor_id = "j-00ff/3";
  b.name = "tiny";
  b.attempt = 3;
  b.job_dir = "/data/jobs/j-00ff";
  b.runner = "/opt/tailor/bin/tailor-runner";
  b.runner_args = {"--plan", "/data/jobs/j-00ff/plan.json", "--out", "/data/jobs/j-00ff", "--resume"};
  b.env = {{"TAILOR_SPEC_ROOT", "/specs/it's here"}};
  lay_out_ranks(2, 2, 1, b);
  b.cpus_per_task = 4;
  b.slurm.partition = "gpu";
  b.slurm.time_limit = "2:00:00";
  b.slurm.sbatch_options = {"--exclusive"};
  const std::string s = batch_script(b);
  for (const char* want :
       {"#SBATCH --comment=j-00ff/3\n", "#SBATCH --no-requeue\n", "#SBATCH --open-mode=append\n",
        "#SBATCH --output=/data/jobs/j-00ff/runner.log\n", "#SBATCH --nodes=2\n", "#SBATCH --ntasks-per-node=1\n",
        "#SBATCH --gres=gpu:1\n", "#SBATCH --partition=gpu\n", "#SBATCH --time=2:00:00\n", "#SBATCH --exclusive\n",
        "#SBATCH --cpus-per-task=4\n", "export TAILOR_SPEC_ROOT='/specs/it'\\''s here'\n", "--kill-on-bad-exit=1",
        "--ntasks=2", "RANK=$SLURM_PROCID", "'/opt/tailor/bin/tailor-runner' '--plan'"}) {
    EXPECT_NE(s.find(want), std::string::npos) << want << "\n" << s;
  }
  // Every #SBATCH line comes before the first command (sbatch stops reading them there).
  EXPECT_LT(s.rfind("#SBATCH"), s.find("set -u"));
  tailor::testing::TempDir dir;
  const std::string path = dir.file("batch.sh");
  std::ofstream(path) << s;
  EXPECT_EQ(std::system(("bash -n " + path).c_str()), 0) << s;
}

TEST(SlurmPlacementTest, APartitionThatFallsShortSaysByHowMuch) {
  auto p = parse_partition(kPartitions, kNodes, "debug");
  ASSERT_TRUE(p.is_ok());
  auto spec_with = [](const std::string& resources) {
    const std::string text =
        "apiVersion: tailor/v1\nkind: TrainingJob\nname: t\nmodel: {preset: tiny-llama-byte, init: random}\n"
        "data: {train: x.txt, format: text, seq_len: 64}\ntraining: {global_batch_size: 8, max_steps: 2}\n"
        "resources: " +
        resources + "\n";
    dsl::LoadOptions o;
    o.check_files = false;
    auto loaded = dsl::load_job_spec_text(text, "t.yaml", "/", o);
    EXPECT_TRUE(loaded.ok()) << loaded.diagnostics.to_string();
    return *loaded.spec;
  };
  const dsl::Catalog& catalog = dsl::Catalog::builtin();
  auto three = spec_on_partition(spec_with("{nodes: 3, gpus: 1, gpu_memory: 8GiB}"), *p, catalog);
  ASSERT_FALSE(three.is_ok());
  EXPECT_EQ(three.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(three.status().message().find("short by 1 node"), std::string::npos) << three.status().message();
  auto gpus = spec_on_partition(spec_with("{gpus: 2, gpu_memory: 8GiB}"), *p, catalog);
  ASSERT_FALSE(gpus.is_ok());
  EXPECT_NE(gpus.status().message().find("short by 1 GPU per node"), std::string::npos) << gpus.status().message();
  auto memory = spec_on_partition(spec_with("{gpus: 0, host_memory: 4000MiB}"), *p, catalog);
  ASSERT_FALSE(memory.is_ok());
  EXPECT_NE(memory.status().message().find("short by 1000 MiB per node"), std::string::npos)
      << memory.status().message();
  // Untyped GPUs need their memory declared.
  auto untyped = spec_on_partition(spec_with("{gpus: 1}"), *p, catalog);
  ASSERT_FALSE(untyped.is_ok());
  EXPECT_EQ(untyped.status().code(), StatusCode::kInvalidArgument);
  // A fitting job gets the nodes' figures: the smallest node's memory.
  auto placed = spec_on_partition(spec_with("{nodes: 2, gpus: 1, gpu_memory: 8GiB}"), *p, catalog);
  ASSERT_TRUE(placed.is_ok()) << placed.status().to_string();
  EXPECT_EQ(placed->resources.gpu_count, 1);
  EXPECT_EQ(placed->resources.host_memory, Bytes::mib(3000));
  auto cpu = spec_on_partition(spec_with("{gpus: 0}"), *p, catalog);
  ASSERT_TRUE(cpu.is_ok());
  EXPECT_EQ(cpu->resources.gpu_count, 0);
  auto two_cpu_nodes = spec_on_partition(spec_with("{gpus: 0, nodes: 2}"), *p, catalog);
  ASSERT_FALSE(two_cpu_nodes.is_ok());
  EXPECT_NE(two_cpu_nodes.status().message().find("CPU training runs on one node"), std::string::npos);
}

}  // namespace
}  // namespace tailor::daemon::slurm
