// Starting the ranks of one job as processes of this host: a stand-in for torchrun, for tests,
// benchmarks and single-host programs that want one process per rank without a launcher.
//
//   std::vector<iris::ProcessExit> exits = iris::run_local_processes(4, {"/proc/self/exe", "--child"});
//   for (const auto& e : exits)
//     if (!e.ok()) std::fprintf(stderr, "%s\n", e.describe().c_str());
//
// Process r runs `argv` with the caller's environment minus every launcher's variables (torchrun's
// RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_*; Open MPI's
// OMPI_COMM_WORLD_*; Hydra's PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS; Slurm's SLURM_*;
// IRIS_MASTER_PORT), plus torchrun's for a job of `world` ranks on this host:
// RANK=LOCAL_RANK=r, WORLD_SIZE=LOCAL_WORLD_SIZE=world, MASTER_ADDR=127.0.0.1 and a loopback
// MASTER_PORT, plus `extra_env`. The launcher listens on MASTER_PORT before any process starts and
// hands the socket to rank 0 (IRIS_STORE_LISTEN_FD, rank 0's environment only), whose store adopts
// it: no other program can take the port in between. So each process finds its place with
// detect_launch_info() and makes its Context with Context::create_from_env(). Output is not captured:
// the processes write to the caller's stdout and stderr. A process that is killed (timeout, failure_grace)
// is killed with every process it started (found through /proc), so a rank that is a wrapper script
// leaves no program running; one that SIGKILL does not end within 30 s is left behind and reported
// (ProcessExit::left_unreaped), never waited for without a bound.
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
  // Once a process has ended badly (a non-zero status or a signal), the ones still running get this long to
  // end by themselves (a peer's failure reaches them through the bootstrap as an iris::RemoteError) before
  // they are killed (SIGKILL), as torchrun stops a job whose worker failed: a rank whose peer died before
  // its bootstrap store ran would otherwise wait out the bootstrap's timeout. 0: wait for them.
  std::chrono::milliseconds failure_grace{30000};
};

// How one rank's process ended.
struct ProcessExit {
  int rank = 0;
  int exit_code = -1;      // the exit status when it exited, else -1
  int signal = 0;          // the signal that ended it, else 0
  bool timed_out = false;  // killed at LocalLaunchOptions::timeout
  std::chrono::milliseconds timeout{0};
  // Killed LocalLaunchOptions::failure_grace after rank `failed_rank` ended badly.
  int failed_rank = -1;
  std::chrono::milliseconds grace{0};
  // Ended, but its status could not be read: this process ignores SIGCHLD (the kernel then reaps
  // children itself) or another thread reaped it. Not ok(): nothing says it succeeded.
  bool status_lost = false;
  // Killed (timed_out or failed_rank), but still not ended `reap_limit` later: asleep in the kernel
  // (uninterruptible), e.g. in a GPU driver that stopped answering. run_local_processes returns without
  // it rather than wait without a bound; it may still hold its GPU.
  bool left_unreaped = false;
  std::chrono::milliseconds reap_limit{0};

  bool ok() const { return !timed_out && failed_rank < 0 && !status_lost && signal == 0 && exit_code == 0; }
  // "rank 2 (process) failed, exit status 1", "rank 2 (process) died from signal 9 (Killed)",
  // "rank 2 (process) did not finish within 120.0 s and was killed", "rank 2 (process) was still running
  // 30.0 s after rank 0 failed and was killed", either of those two followed by ", but had not ended 30.0 s
  // later (...) and was left behind", "rank 2 (process) ended, but its exit status was lost (...)",
  // or "rank 2 (process) succeeded".
  std::string describe() const;
};

// Starts `world` processes of argv[0] (a path; argv[1..] are its arguments) and blocks until every one
// has ended or the timeout has passed; returns how each ended, indexed by rank. Throws
// iris::InvalidArgument for world < 1 or an empty argv, and iris::Error when a process cannot be
// started (the ones already started are killed first) or no loopback socket can be opened.
std::vector<ProcessExit> run_local_processes(int world, const std::vector<std::string>& argv,
                                             const LocalLaunchOptions& options = {});

}  // namespace iris
