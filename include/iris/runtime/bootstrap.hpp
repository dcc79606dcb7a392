// Bootstrap: who am I, how many are we, and host byte exchange between the ranks of one job.
//
// Two transports:
//   * threads of one process  — make_thread_bootstraps(world): shared memory + condition variables;
//   * one process per GPU     — TcpBootstrap: a small TCP store served by rank 0 on MASTER_ADDR:MASTER_PORT
//                               (loopback for one host), plus Unix-domain sockets for passing file
//                               descriptors between local processes (SCM_RIGHTS).
//
// Every operation is collective (all ranks call it, in the same order) and bounded by a timeout: a
// rank that never arrives gives iris::TimeoutError naming the missing ranks; a rank that fails
// (abort(), or its process dies) releases the others with iris::RemoteError naming it.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace iris {

class Bootstrap {
 public:
  virtual ~Bootstrap() = default;

  virtual int rank() const = 0;
  virtual int world_size() const = 0;

  // Every rank contributes `mine` (any length, may differ by rank); every rank receives all
  // contributions indexed by rank.
  virtual std::vector<std::string> allgather(std::string_view mine) = 0;

  // `value` from `root` on every rank (the argument is ignored on other ranks).
  virtual std::string broadcast(std::string_view value, int root);

  // Returns when every rank has called it.
  virtual void barrier();

  // Sends this rank's `fd` to every other rank and returns the descriptors received, indexed by
  // rank (each a new descriptor owned by the caller; the entry for this rank is -1).
  // Only between processes of one host. Throws iris::Error where the transport has no use for it
  // (threads share one descriptor table).
  virtual std::vector<int> exchange_fds(int fd) = 0;

  // Marks this rank failed with `reason`: every other rank blocked in (or later entering) a
  // bootstrap operation throws iris::RemoteError naming this rank and the reason. Never throws, and
  // returns within about 2 s: between processes it waits at most 1 s for another thread of this rank
  // that is sending, then at most 1 s to send the reason to the store (the local failure is recorded
  // first, whatever happens to the send).
  virtual void abort(const std::string& reason) noexcept = 0;

  // Timeout applied to each operation.
  virtual std::chrono::milliseconds timeout() const = 0;
};

// `world` bootstraps sharing one in-process group; element r is rank r's, to be used by one thread.
std::vector<std::shared_ptr<Bootstrap>> make_thread_bootstraps(int world,
                                                                std::chrono::milliseconds timeout);

// Where this process stands in a job started by a launcher.
struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  // Where master_port came from, for messages: "MASTER_PORT", "IRIS_MASTER_PORT", "MASTER_PORT + 1 (...)"
  // under torchrun's agent store, or "the default".
  std::string master_port_source = "the default";
  std::string launcher;  // "torchrun", "openmpi", "hydra", "slurm" or "none"
  // The job this process belongs to, as its launcher names it, or empty where nothing names it:
  // "IRIS_JOB_ID=<id>" when set (the same on every rank), else "slurm job <SLURM_JOB_ID> step <SLURM_STEP_ID>",
  // "openmpi <PMIX_NAMESPACE or OMPI_MCA_ess_base_jobid>" or "torchrun <TORCHELASTIC_RUN_ID>" for the
  // launcher read. The store refuses, alone, a process that names another job than rank 0's: two jobs on
  // one host whose ranks share a port (both on the default 29500, one's rank 0 unable to bind it) would
  // otherwise form one job of the ranks that connected first, which map each other's heaps.
  std::string job;
  // Why a launcher's variables were present but not read as a launch (launcher "none"), else empty; logged
  // as a warning once per process. Today: a Slurm batch script, or a program it runs without srun.
  std::string note;
  // Rank 0 only: a socket already listening on master_port, handed over by the launcher that picked
  // the port (IRIS_STORE_LISTEN_FD; run_local_processes does this), so no other program can take the
  // port between the pick and the store's start. The store listens on a duplicate; the descriptor stays
  // open, for the process's later stores. -1: the store binds master_port itself.
  int store_listen_fd = -1;
};

// Reads the launcher's environment, in this order of precedence:
//   torchrun / generic: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
//   Open MPI:           OMPI_COMM_WORLD_RANK, _SIZE, _LOCAL_RANK, _LOCAL_SIZE (+ MASTER_ADDR/PORT if set)
//   Hydra (MPICH, Intel MPI mpiexec): PMI_RANK, PMI_SIZE, MPI_LOCALRANKID, MPI_LOCALNRANKS (+ MASTER_*); read
//                       only with MPI_LOCALRANKID, which Hydra sets and other PMI launchers need not
//   Slurm (srun):       SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID (+ MASTER_*); this node's ranks from
//                       the layout placed (SLURM_STEP_TASKS_PER_NODE or SLURM_TASKS_PER_NODE, "2(x3),1", this
//                       node's entry by SLURM_NODEID), else SLURM_NTASKS_PER_NODE; refused when
//                       SLURM_STEP_NUM_NODES or SLURM_NNODES says several nodes but the count puts every rank on
//                       this one. A process with SLURM_PROCID but no SLURM_STEP_NUM_TASKS is no task of an srun
//                       step (a batch script, or a program it runs without srun): one rank, with a `note`.
// With none of them set: a single rank (launcher "none").
// The store's port: IRIS_MASTER_PORT when set, else MASTER_PORT, else 29500. Under torchrun (torchelastic
// sets TORCHELASTIC_USE_AGENT_STORE=True) the launcher's agent already serves its own store on MASTER_PORT
// (the one init_process_group("env://") joins), so iris's takes MASTER_PORT + 1 there, on every rank alike.
// Rank 0 also reads IRIS_STORE_LISTEN_FD (store_listen_fd); other ranks ignore it.
// Throws InvalidArgument on malformed or inconsistent values (rank outside [0, world), bad port...).
LaunchInfo detect_launch_info();

// A TCP store client (rank 0 also runs the server thread) for one process per rank.
std::shared_ptr<Bootstrap> make_tcp_bootstrap(const LaunchInfo& info, std::chrono::milliseconds timeout);

// Bootstrap timeout from IRIS_BOOTSTRAP_TIMEOUT (seconds, may be fractional), default 300 s.
std::chrono::milliseconds default_bootstrap_timeout();

}  // namespace iris
