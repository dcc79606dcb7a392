// detect_launch_info() and default_bootstrap_timeout(): reading the launcher's environment.
// Every test starts from an environment without any launcher variable and restores the original
// one afterwards, so the suite behaves the same inside torchrun, mpirun or srun.
#include <chrono>
#include <cstdlib>
#include <map>
#include <optional>
#include <string>

#include <gtest/gtest.h>

#include "iris/core/error.hpp"
#include "iris/runtime/bootstrap.hpp"

namespace {

const char* const kLaunchVariables[] = {
    "RANK",
    "WORLD_SIZE",
    "LOCAL_RANK",
    "LOCAL_WORLD_SIZE",
    "MASTER_ADDR",
    "MASTER_PORT",
    "OMPI_COMM_WORLD_RANK",
    "OMPI_COMM_WORLD_SIZE",
    "OMPI_COMM_WORLD_LOCAL_RANK",
    "OMPI_COMM_WORLD_LOCAL_SIZE",
    "SLURM_PROCID",
    "SLURM_NTASKS",
    "SLURM_LOCALID",
    "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE",
    "SLURM_NNODES",
    "SLURM_NODEID",
    "SLURM_STEP_TASKS_PER_NODE",
    "SLURM_STEP_NUM_NODES",
    "SLURM_STEP_NUM_TASKS",
    "SLURM_JOB_ID",
    "SLURM_STEP_ID",
    "PMIX_NAMESPACE",
    "OMPI_MCA_ess_base_jobid",
    "TORCHELASTIC_RUN_ID",
    "IRIS_JOB_ID",
    "PMI_RANK",
    "PMI_SIZE",
    "MPI_LOCALRANKID",
    "MPI_LOCALNRANKS",
    "IRIS_BOOTSTRAP_TIMEOUT",
    "IRIS_STORE_LISTEN_FD",
    "IRIS_MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE",
};

class LaunchEnv : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* name : kLaunchVariables) {
      const char* v = std::getenv(name);
      saved_[name] = v ? std::optional<std::string>(v) : std::nullopt;
      ::unsetenv(name);
    }
  }
  void TearDown() override {
    for (const auto& [name, value] : saved_) {
      if (value)
        ::setenv(name.c_str(), value->c_str(), 1);
      else
        ::unsetenv(name.c_str());
    }
  }
  static void set(const char* name, const char* value) { ::setenv(name, value, 1); }

  // The what() of the InvalidArgument that detect_launch_info throws, or what happened instead.
  static std::string launch_error() {
    try {
      iris::detect_launch_info();
    } catch (const iris::InvalidArgument& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("<another exception type> ") + e.what();
    }
    return "<no exception>";
  }

  // The four numbers and the launcher of a detected launch, in one check.
  static void expect_launch(const iris::LaunchInfo& info, const char* launcher, int rank, int world, int local_rank,
                            int local_world) {
    EXPECT_EQ(info.launcher, launcher);
    EXPECT_EQ(info.rank, rank);
    EXPECT_EQ(info.world_size, world);
    EXPECT_EQ(info.local_rank, local_rank);
    EXPECT_EQ(info.local_world_size, local_world);
  }

  static std::string timeout_error() {
    try {
      iris::default_bootstrap_timeout();
    } catch (const iris::InvalidArgument& e) {
      return e.what();
    }
    return "<no exception>";
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

TEST_F(LaunchEnv, NoLauncherIsASingleRank) {
  auto info = iris::detect_launch_info();
  expect_launch(info, "none", 0, 1, 0, 1);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
}

TEST_F(LaunchEnv, Torchrun) {
  set("RANK", "5");
  set("WORLD_SIZE", "8");
  set("LOCAL_RANK", "1");
  set("LOCAL_WORLD_SIZE", "4");
  set("MASTER_ADDR", "node0.cluster");
  set("MASTER_PORT", "12345");
  // Lower-precedence launchers are ignored when torchrun's variables are present.
  set("OMPI_COMM_WORLD_RANK", "0");
  set("OMPI_COMM_WORLD_SIZE", "2");
  set("SLURM_PROCID", "0");
  set("SLURM_NTASKS", "2");
  auto info = iris::detect_launch_info();
  expect_launch(info, "torchrun", 5, 8, 1, 4);
  EXPECT_EQ(info.master_addr, "node0.cluster");
  EXPECT_EQ(info.master_port, 12345);
  EXPECT_EQ(info.master_port_source, "MASTER_PORT");
}

// Under torchrun the agent serves its own store on MASTER_PORT, so iris's takes the next port, on every rank
// alike; IRIS_MASTER_PORT names the port outright, under any launcher.
TEST_F(LaunchEnv, TorchrunsAgentStoreKeepsMasterPortSoIrisTakesTheNext) {
  set("RANK", "1");
  set("WORLD_SIZE", "2");
  set("MASTER_PORT", "29500");
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  auto info = iris::detect_launch_info();
  EXPECT_EQ(info.master_port, 29501);
  EXPECT_EQ(info.master_port_source, "MASTER_PORT + 1 (torchrun's agent serves its own store on MASTER_PORT=29500)");
  set("TORCHELASTIC_USE_AGENT_STORE", "False");  // a worker that hosts its own stores
  EXPECT_EQ(iris::detect_launch_info().master_port, 29500);
  set("TORCHELASTIC_USE_AGENT_STORE", "True");
  set("IRIS_MASTER_PORT", "41000");
  info = iris::detect_launch_info();
  EXPECT_EQ(info.master_port, 41000);
  EXPECT_EQ(info.master_port_source, "IRIS_MASTER_PORT");
  ::unsetenv("IRIS_MASTER_PORT");
  set("MASTER_PORT", "65535");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: torchrun's agent serves its own store on MASTER_PORT=65535, and iris's store would take "
            "the port after it, which does not exist; set IRIS_MASTER_PORT to a free port (the same on every rank)");
  ::unsetenv("MASTER_PORT");
  ::unsetenv("TORCHELASTIC_USE_AGENT_STORE");
  set("IRIS_MASTER_PORT", "http");
  EXPECT_EQ(launch_error(), "iris bootstrap: IRIS_MASTER_PORT='http' is not a port number (expected 1..65535)");
  ::unsetenv("IRIS_MASTER_PORT");
  EXPECT_EQ(iris::detect_launch_info().master_port_source, "the default");
}

// A launcher that listens on MASTER_PORT itself hands the socket to rank 0's store; other ranks ignore it.
TEST_F(LaunchEnv, StoreListenFdIsRankZerosAlone) {
  set("WORLD_SIZE", "2");
  set("RANK", "0");
  EXPECT_EQ(iris::detect_launch_info().store_listen_fd, -1);
  set("IRIS_STORE_LISTEN_FD", "7");
  EXPECT_EQ(iris::detect_launch_info().store_listen_fd, 7);
  set("RANK", "1");
  EXPECT_EQ(iris::detect_launch_info().store_listen_fd, -1);
  set("IRIS_STORE_LISTEN_FD", "seven");
  EXPECT_EQ(iris::detect_launch_info().store_listen_fd, -1);  // not even read
  set("RANK", "0");
  EXPECT_EQ(launch_error(), "iris bootstrap: IRIS_STORE_LISTEN_FD='seven' is not an integer");
  set("IRIS_STORE_LISTEN_FD", "-3");
  EXPECT_EQ(launch_error(), "iris bootstrap: IRIS_STORE_LISTEN_FD=-3 is not a file descriptor (expected 0 or more)");
}

TEST_F(LaunchEnv, GenericRankAndWorldOnlyMeansOneNode) {
  set("RANK", "2");
  set("WORLD_SIZE", "3");
  auto info = iris::detect_launch_info();
  EXPECT_EQ(info.launcher, "torchrun");
  EXPECT_EQ(info.local_rank, 2);
  EXPECT_EQ(info.local_world_size, 3);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
}

TEST_F(LaunchEnv, OpenMpi) {
  set("OMPI_COMM_WORLD_RANK", "3");
  set("OMPI_COMM_WORLD_SIZE", "4");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "3");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  set("SLURM_PROCID", "0");  // ignored: Open MPI takes precedence over Slurm
  set("SLURM_NTASKS", "1");
  set("MASTER_PORT", "40000");
  auto info = iris::detect_launch_info();
  expect_launch(info, "openmpi", 3, 4, 3, 4);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 40000);
}

TEST_F(LaunchEnv, OpenMpiAcrossNodesNeedsMasterAddr) {
  set("OMPI_COMM_WORLD_RANK", "5");
  set("OMPI_COMM_WORLD_SIZE", "8");
  set("OMPI_COMM_WORLD_LOCAL_RANK", "1");
  set("OMPI_COMM_WORLD_LOCAL_SIZE", "4");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: the job spans several nodes (OMPI_COMM_WORLD_SIZE=8, OMPI_COMM_WORLD_LOCAL_SIZE=4) but "
            "MASTER_ADDR is not set; set MASTER_ADDR (and MASTER_PORT) to the address of the node running rank 0");
  set("MASTER_ADDR", "10.0.0.1");
  auto info = iris::detect_launch_info();
  EXPECT_EQ(info.master_addr, "10.0.0.1");
  EXPECT_EQ(info.local_world_size, 4);
}

// MPICH's and Intel MPI's mpiexec (Hydra): before 2026-12-05 iris read none of its variables, so each of its
// N processes was a job of one rank on device 0.
TEST_F(LaunchEnv, HydraOfMpichAndIntelMpi) {
  set("PMI_RANK", "5");
  set("PMI_SIZE", "8");
  set("MPI_LOCALRANKID", "1");
  set("MPI_LOCALNRANKS", "4");
  set("MASTER_ADDR", "10.0.0.1");
  set("SLURM_PROCID", "1");  // Hydra's proxy's, under Slurm: Hydra's own variables rule
  set("SLURM_STEP_NUM_TASKS", "2");
  iris::LaunchInfo info = iris::detect_launch_info();
  expect_launch(info, "hydra", 5, 8, 1, 4);
  ::unsetenv("MPI_LOCALNRANKS");
  EXPECT_EQ(launch_error(), "iris bootstrap: MPI_LOCALRANKID is set but MPI_LOCALNRANKS is not set");
  // PMI_RANK alone (a PMI library of another launcher, srun --mpi=pmi2) says nothing of the node: not Hydra.
  ::unsetenv("MPI_LOCALRANKID");
  EXPECT_EQ(iris::detect_launch_info().launcher, "slurm");
  set("OMPI_COMM_WORLD_RANK", "0");  // Open MPI before Hydra
  set("OMPI_COMM_WORLD_SIZE", "1");
  set("MPI_LOCALRANKID", "1");
  set("MPI_LOCALNRANKS", "4");
  EXPECT_EQ(iris::detect_launch_info().launcher, "openmpi");
}

TEST_F(LaunchEnv, SlurmTasksPerNodeVariants) {
  set("SLURM_PROCID", "6");
  set("SLURM_STEP_NUM_TASKS", "8");
  set("SLURM_LOCALID", "2");
  set("SLURM_NNODES", "2");
  set("MASTER_ADDR", "10.0.0.1");
  set("SLURM_TASKS_PER_NODE", "4(x2)");
  auto info = iris::detect_launch_info();
  expect_launch(info, "slurm", 6, 8, 2, 4);
  EXPECT_EQ(info.master_addr, "10.0.0.1");

  // The layout the step got wins over the one requested (a job can carry --ntasks-per-node=4 with another
  // layout placed); this node's entry by SLURM_NODEID, else the first node's.
  set("SLURM_NTASKS_PER_NODE", "4");
  set("SLURM_TASKS_PER_NODE", "3,5");
  EXPECT_EQ(iris::detect_launch_info().local_world_size, 3);
  set("SLURM_NODEID", "1");
  EXPECT_EQ(iris::detect_launch_info().local_world_size, 5);
  set("SLURM_TASKS_PER_NODE", "3(x2),6");
  set("SLURM_NODEID", "2");
  EXPECT_EQ(iris::detect_launch_info().local_world_size, 6);
  set("SLURM_NODEID", "3");
  EXPECT_EQ(launch_error(), "iris bootstrap: SLURM_NODEID=3 is outside the 3 nodes of SLURM_TASKS_PER_NODE='3(x2),6'");
  ::unsetenv("SLURM_NODEID");
  set("SLURM_STEP_TASKS_PER_NODE", "4(x2)");  // the step's own, first of all
  EXPECT_EQ(iris::detect_launch_info().local_world_size, 4);
  ::unsetenv("SLURM_STEP_TASKS_PER_NODE");
  ::unsetenv("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(iris::detect_launch_info().local_world_size, 4) << "the requested count when nothing else says";
  ::unsetenv("SLURM_NTASKS_PER_NODE");

  for (const char* bad : {"(x2)", "4(x)", "4(2)", "4,", "0", "2(x0)", "-1", "4x"}) {
    set("SLURM_TASKS_PER_NODE", bad);
    EXPECT_EQ(launch_error(), std::string("iris bootstrap: SLURM_TASKS_PER_NODE='") + bad +
                                  "' is not a list of task counts (expected e.g. 4 or 2(x3),1)");
  }

  ::unsetenv("SLURM_TASKS_PER_NODE");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: cannot tell how many ranks run on this node: SLURM_NNODES=2 but neither "
            "SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set");
}

TEST_F(LaunchEnv, SlurmSingleNode) {
  set("SLURM_PROCID", "1");
  set("SLURM_STEP_NUM_TASKS", "2");
  set("SLURM_LOCALID", "1");
  set("SLURM_NNODES", "1");
  auto info = iris::detect_launch_info();
  EXPECT_EQ(info.launcher, "slurm");
  EXPECT_EQ(info.local_rank, 1);
  EXPECT_EQ(info.local_world_size, 2);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  EXPECT_EQ(info.master_port, 29500);
}

TEST_F(LaunchEnv, SlurmAcrossNodesNeedsMasterAddr) {
  set("SLURM_PROCID", "0");
  set("SLURM_STEP_NUM_TASKS", "4");
  set("SLURM_LOCALID", "0");
  set("SLURM_STEP_NUM_NODES", "2");
  set("SLURM_STEP_TASKS_PER_NODE", "2(x2)");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: the job spans several nodes (SLURM_STEP_NUM_TASKS=4, SLURM_STEP_TASKS_PER_NODE=2) but "
            "MASTER_ADDR is not set; set MASTER_ADDR (and MASTER_PORT) to the address of the node running rank 0");
}

// srun --preserve-env (-E) leaves SLURM_NTASKS (and SLURM_TASKS_PER_NODE) at the allocation's counts
// while the step runs fewer tasks: the step's ranks are SLURM_STEP_NUM_TASKS, laid out by
// SLURM_STEP_TASKS_PER_NODE. Read by the allocation's 8, rank 0 would wait for 6 ranks that never start.
TEST_F(LaunchEnv, SlurmStepCountsRuleOverTheAllocations) {
  set("SLURM_PROCID", "1");
  set("SLURM_LOCALID", "1");
  set("SLURM_NTASKS", "8");
  set("SLURM_TASKS_PER_NODE", "8");
  set("SLURM_NNODES", "1");
  set("SLURM_STEP_NUM_TASKS", "2");
  set("SLURM_STEP_TASKS_PER_NODE", "2");
  set("SLURM_STEP_NUM_NODES", "1");
  const iris::LaunchInfo info = iris::detect_launch_info();
  expect_launch(info, "slurm", 1, 2, 1, 2);
  EXPECT_EQ(info.note, "");
  set("SLURM_PROCID", "2");
  EXPECT_EQ(launch_error(), "iris bootstrap: SLURM_PROCID=2 is outside [0, SLURM_STEP_NUM_TASKS=2)");
}

// A batch script is task 0 of the job's batch step, and a program it runs without srun inherits that: SLURM_PROCID=0
// and the allocation's SLURM_NTASKS, but no step task count. Read as rank 0 of 4 it would host a store and wait out
// the bootstrap timeout (300 s) for ranks nobody starts; it is one process, so it is one rank, and says why.
TEST_F(LaunchEnv, ABatchScriptWithoutSrunIsOneRankAndSaysWhy) {
  set("SLURM_PROCID", "0");
  set("SLURM_LOCALID", "0");
  set("SLURM_NODEID", "0");
  set("SLURM_NTASKS", "4");
  set("SLURM_NNODES", "1");
  set("SLURM_TASKS_PER_NODE", "4");
  iris::LaunchInfo info = iris::detect_launch_info();
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.rank, 0);
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.local_world_size, 1);
  EXPECT_EQ(info.note,
            "SLURM_PROCID is set but SLURM_STEP_NUM_TASKS is not: this process is not a task that srun started (a "
            "batch script, or a program it runs without srun), so it runs as a single rank; to run the allocation's "
            "SLURM_NTASKS=4 ranks, start them with srun");
  // Without --ntasks (or with one task) there is nothing to start with srun.
  set("SLURM_NTASKS", "1");
  EXPECT_EQ(iris::detect_launch_info().note,
            "SLURM_PROCID is set but SLURM_STEP_NUM_TASKS is not: this process is not a task that srun started (a "
            "batch script, or a program it runs without srun), so it runs as a single rank");
  ::unsetenv("SLURM_NTASKS");
  info = iris::detect_launch_info();
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.world_size, 1);
  // An allocation over several nodes: still this one process, not rank 0 of a job whose store nobody finds.
  set("SLURM_NTASKS", "8");
  set("SLURM_NNODES", "2");
  set("SLURM_TASKS_PER_NODE", "4(x2)");
  info = iris::detect_launch_info();
  EXPECT_EQ(info.launcher, "none");
  EXPECT_EQ(info.world_size, 1);
  EXPECT_EQ(info.master_addr, "127.0.0.1");
  // The launchers before Slurm need no such note.
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  EXPECT_EQ(iris::detect_launch_info().launcher, "torchrun");
  EXPECT_EQ(iris::detect_launch_info().note, "");
}

// A step's counts that put every rank on this node of several (the step's layout missing, a requested
// SLURM_NTASKS_PER_NODE in its place) would make every node host its own store and wait: refused.
TEST_F(LaunchEnv, SlurmLayoutsThatSpanNodesAreNeverReadAsOne) {
  set("SLURM_PROCID", "0");
  set("SLURM_STEP_NUM_TASKS", "4");
  set("SLURM_LOCALID", "0");
  set("SLURM_STEP_NUM_NODES", "4");
  set("SLURM_NTASKS_PER_NODE", "4");
  set("SLURM_STEP_TASKS_PER_NODE", "1(x4)");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: the job spans several nodes (SLURM_STEP_NUM_TASKS=4, SLURM_STEP_TASKS_PER_NODE=1) but "
            "MASTER_ADDR is not set; set MASTER_ADDR (and MASTER_PORT) to the address of the node running rank 0");
  ::unsetenv("SLURM_STEP_TASKS_PER_NODE");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: SLURM_STEP_NUM_NODES=4 says the job spans several nodes, but SLURM_NTASKS_PER_NODE=4 puts "
            "all SLURM_STEP_NUM_TASKS=4 ranks on this one; start the ranks with srun (or set RANK, WORLD_SIZE, "
            "LOCAL_RANK and LOCAL_WORLD_SIZE)");
  set("SLURM_STEP_NUM_NODES", "1");  // a step of one node in a larger allocation: the step's count rules
  set("SLURM_NNODES", "4");
  EXPECT_EQ(iris::detect_launch_info().local_world_size, 4);
}

// The job a process belongs to, as its launcher names it: the store refuses a process of another job
// (BootstrapTcp.ARankOfAnotherJobIsRefusedAloneBeforeTheJobForms).
TEST_F(LaunchEnv, TheJobIsNamedByItsLauncherOrIrisJobId) {
  EXPECT_EQ(iris::detect_launch_info().job, "") << "no launcher: one rank, no job to tell apart";
  set("SLURM_PROCID", "1");
  set("SLURM_STEP_NUM_TASKS", "2");
  EXPECT_EQ(iris::detect_launch_info().job, "");
  set("SLURM_JOB_ID", "4242");
  EXPECT_EQ(iris::detect_launch_info().job, "slurm job 4242");
  set("SLURM_STEP_ID", "3");
  EXPECT_EQ(iris::detect_launch_info().job, "slurm job 4242 step 3");
  set("OMPI_COMM_WORLD_RANK", "1");  // Open MPI comes before Slurm
  set("OMPI_COMM_WORLD_SIZE", "2");
  EXPECT_EQ(iris::detect_launch_info().job, "");
  set("OMPI_MCA_ess_base_jobid", "3735879681");
  EXPECT_EQ(iris::detect_launch_info().job, "openmpi 3735879681");
  set("PMIX_NAMESPACE", "prterun-node0-1234@1");
  EXPECT_EQ(iris::detect_launch_info().job, "openmpi prterun-node0-1234@1");
  set("RANK", "1");  // torchrun before both
  set("WORLD_SIZE", "2");
  EXPECT_EQ(iris::detect_launch_info().job, "");
  set("TORCHELASTIC_RUN_ID", "a1b2");
  EXPECT_EQ(iris::detect_launch_info().job, "torchrun a1b2");
  set("IRIS_JOB_ID", "serve-7");  // by hand, first of all
  EXPECT_EQ(iris::detect_launch_info().job, "IRIS_JOB_ID=serve-7");
}

TEST_F(LaunchEnv, BadIntegers) {
  set("WORLD_SIZE", "4");
  set("RANK", "1x");
  EXPECT_EQ(launch_error(), "iris bootstrap: RANK='1x' is not an integer");
  set("RANK", " 1");
  EXPECT_EQ(launch_error(), "iris bootstrap: RANK=' 1' is not an integer");
  set("RANK", "99999999999999999999");
  EXPECT_EQ(launch_error(), "iris bootstrap: RANK='99999999999999999999' is not an integer");
  set("RANK", "1");
  set("LOCAL_RANK", "one");
  EXPECT_EQ(launch_error(), "iris bootstrap: LOCAL_RANK='one' is not an integer");
}

TEST_F(LaunchEnv, OutOfRangeValues) {
  set("RANK", "4");
  set("WORLD_SIZE", "4");
  EXPECT_EQ(launch_error(), "iris bootstrap: RANK=4 is outside [0, WORLD_SIZE=4)");
  set("RANK", "-1");
  EXPECT_EQ(launch_error(), "iris bootstrap: RANK=-1 is outside [0, WORLD_SIZE=4)");
  set("RANK", "0");
  set("WORLD_SIZE", "0");
  EXPECT_EQ(launch_error(), "iris bootstrap: WORLD_SIZE=0 must be at least 1");
  set("WORLD_SIZE", "4");
  set("LOCAL_WORLD_SIZE", "2");
  set("LOCAL_RANK", "2");
  set("MASTER_ADDR", "10.0.0.1");
  EXPECT_EQ(launch_error(), "iris bootstrap: LOCAL_RANK=2 is outside [0, LOCAL_WORLD_SIZE=2)");
  set("LOCAL_WORLD_SIZE", "8");
  EXPECT_EQ(launch_error(), "iris bootstrap: LOCAL_WORLD_SIZE=8 is outside [1, WORLD_SIZE=4]");

  set("OMPI_COMM_WORLD_RANK", "2");  // same checks, Open MPI's names in the message
  set("OMPI_COMM_WORLD_SIZE", "2");
  ::unsetenv("RANK");
  ::unsetenv("WORLD_SIZE");
  EXPECT_EQ(launch_error(), "iris bootstrap: OMPI_COMM_WORLD_RANK=2 is outside [0, OMPI_COMM_WORLD_SIZE=2)");
}

TEST_F(LaunchEnv, MissingPartners) {
  set("RANK", "0");
  EXPECT_EQ(launch_error(), "iris bootstrap: RANK is set but WORLD_SIZE is not (a torchrun-style launch sets both)");
  ::unsetenv("RANK");
  set("WORLD_SIZE", "2");
  EXPECT_EQ(launch_error(), "iris bootstrap: WORLD_SIZE is set but RANK is not (a torchrun-style launch sets both)");
  ::unsetenv("WORLD_SIZE");
  set("OMPI_COMM_WORLD_RANK", "0");
  EXPECT_EQ(launch_error(), "iris bootstrap: OMPI_COMM_WORLD_RANK is set but OMPI_COMM_WORLD_SIZE is not set");
  ::unsetenv("OMPI_COMM_WORLD_RANK");
  set("SLURM_PROCID", "0");
  set("SLURM_STEP_NUM_TASKS", "4");
  set("SLURM_NTASKS_PER_NODE", "2");
  set("MASTER_ADDR", "10.0.0.1");
  EXPECT_EQ(launch_error(),
            "iris bootstrap: SLURM_NTASKS_PER_NODE=2 says the job spans several nodes, but the local rank is not set "
            "(SLURM_LOCALID)");
}

TEST_F(LaunchEnv, BadPorts) {
  set("RANK", "0");
  set("WORLD_SIZE", "1");
  for (const char* port : {"0", "65536", "-5", "http", "80 "}) {
    set("MASTER_PORT", port);
    EXPECT_EQ(launch_error(),
              std::string("iris bootstrap: MASTER_PORT='") + port + "' is not a port number (expected 1..65535)");
  }
  set("MASTER_PORT", "65535");
  EXPECT_EQ(iris::detect_launch_info().master_port, 65535);
}

TEST_F(LaunchEnv, BootstrapTimeout) {
  using std::chrono::milliseconds;
  EXPECT_EQ(iris::default_bootstrap_timeout(), milliseconds(300'000));
  set("IRIS_BOOTSTRAP_TIMEOUT", "2.5");
  EXPECT_EQ(iris::default_bootstrap_timeout(), milliseconds(2500));
  set("IRIS_BOOTSTRAP_TIMEOUT", "60");
  EXPECT_EQ(iris::default_bootstrap_timeout(), milliseconds(60'000));
  set("IRIS_BOOTSTRAP_TIMEOUT", "0.0001");  // never rounds down to "no time at all"
  EXPECT_EQ(iris::default_bootstrap_timeout(), milliseconds(1));
  for (const char* bad : {"abc", "0", "-3", "5s", "inf", "nan", "1e30"}) {
    set("IRIS_BOOTSTRAP_TIMEOUT", bad);
    EXPECT_EQ(timeout_error(), std::string("iris bootstrap: IRIS_BOOTSTRAP_TIMEOUT='") + bad +
                                   "' is not a valid timeout: expected a positive number of seconds, such as 300 or "
                                   "2.5");
  }
}

}  // namespace
