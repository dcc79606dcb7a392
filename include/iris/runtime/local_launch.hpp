// Starting the ranks of one job as processes of this host: a stand-in for torchrun, for tests,
// benchmarks and single-host programs that want one process per rank without a launcher.
//
//   std::vector<iris::ProcessExit> exits = iris::run_local_processes(4, {"/proc/self/exe", "--child"});
//   for (const auto& e : exits)
//     if (!e.ok()) std::fprintf(stderr, "%s\n", e.describe().c_str());
//
// Process r runs `argv` with the caller's environment minus every launcher's variables (torchrun's
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; Open MPI's
// OMPI_COMM_WORLD_*; Slurm's SLURM_*), plus torchrun's for a job of `world` ranks on this host:
// RANK=LOCAL_RANK=r, WORLD_SIZE=LOCAL_WORLD_SIZE=world, MASTER_ADDR=127.0.0.1 and a loopback
// MASTER_PORT, plus `extra_env`. The launcher listens on MASTER_PORT before any process starts and
// hands the socket to rank 0 (IRIS_STORE_LISTEN_FD, rank 0's environment only), whose store adopts
// it: no other program can take the port in between. So each process finds its place with
// detect_launch_info() and makes its Context with Context::create_from_env(). Output is not captured:
// the processes write to the caller's stdout and stderr.
#pragma once

#include <chrono>
#include <string>
#include <vector>

namespace iris {

struct LocalLaunchOptions {
  // "NAME=value" entries, set in every process; they replace inherited variables of the same name.
  std::vector<std::string> extra_env;
  // 0: wait as long as the processes run. Otherwise every process still running this long after the
  // start is killed (SIGKILL) and reported as timed out.
  std::chrono::milliseconds timeout{0};
};

// How one rank's process ended.
struct ProcessExit {
  int rank = 0;
  int exit_code = -1;      // the exit status when it exited, else -1
  int signal = 0;          // the signal that ended it, else 0
  bool timed_out = false;  // killed at LocalLaunchOptions::timeout
  std::chrono::milliseconds timeout{0};

  bool ok() const { return !timed_out && signal == 0 && exit_code == 0; }
  // "rank 2 (process) failed, exit status 1", "rank 2 (process) died from signal 9 (Killed)",
  // "rank 2 (process) did not finish within 120 s and was killed", or "rank 2 (process) succeeded".
  std::string describe() const;
};

// Starts `world` processes of argv[0] (a path; argv[1..] are its arguments) and blocks until every one
// has ended or the timeout has passed; returns how each ended, indexed by rank. Throws
// iris::InvalidArgument for world < 1 or an empty argv, and iris::Error when a process cannot be
// started (the ones already started are killed first) or no loopback socket can be opened.
std::vector<ProcessExit> run_local_processes(int world, const std::vector<std::string>& argv,
                                             const LocalLaunchOptions& options = {});

}  // namespace iris
