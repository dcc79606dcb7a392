// Transport-independent parts of the bootstrap: the default broadcast and barrier, the timeout from
// the environment, and reading the launcher's environment (torchrun, Open MPI, Slurm).
#include "iris/runtime/bootstrap.hpp"

#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <vector>

#include "iris/core/error.hpp"
#include "iris/core/log.hpp"
#include "runtime/bootstrap_detail.hpp"

namespace iris {

// ---- default collectives built on allgather ---------------------------------------------------

std::string Bootstrap::broadcast(std::string_view value, int root) {
  IRIS_CHECK_ARG(root >= 0 && root < world_size(), "iris bootstrap: broadcast root ", root, " is outside [0, ",
                 world_size(), ")");
  // Only the root's contribution carries data; the others send nothing so the exchange stays small.
  std::vector<std::string> all = allgather(rank() == root ? value : std::string_view{});
  return std::move(all[root]);
}

void Bootstrap::barrier() { allgather({}); }

// ---- shared helpers -------------------------------------------------------------------------------

namespace detail {

std::string format_seconds(std::chrono::milliseconds duration) {
  long long ms = duration.count();
  if (ms < 0) ms = 0;
  char frac[4];
  std::snprintf(frac, sizeof(frac), "%03lld", ms % 1000);
  std::string digits(frac);
  while (digits.size() > 1 && digits.back() == '0') digits.pop_back();
  return str_cat(ms / 1000, ".", digits);
}

std::string format_ranks(const std::vector<int>& ranks) {
  std::string out = ranks.size() == 1 ? "rank " : "ranks ";
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (i > 0) out += ", ";
    out += std::to_string(ranks[i]);
  }
  return out;
}

std::optional<double> parse_seconds(const char* text) {
  errno = 0;
  char* end = nullptr;
  const double seconds = std::strtod(text, &end);
  if (end == text || *end != '\0' || errno != 0 || !std::isfinite(seconds)) return std::nullopt;
  return seconds;
}

bool wait_fd(int fd, short events, Clock::time_point deadline) {
  for (;;) {
    auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - Clock::now()).count();
    if (left <= 0) left = 0;
    pollfd p{fd, events, 0};
    int n = ::poll(&p, 1, static_cast<int>(std::min<long long>(left, 1 << 30)));
    if (n > 0) return true;
    if (n == 0) {
      if (Clock::now() >= deadline) return false;
      continue;  // poll rounds down in rare cases; go around until the deadline really passed
    }
    if (errno != EINTR) IRIS_SYSCHECK(n);
  }
}

bool connected_to_itself(int fd) {
  sockaddr_storage self{}, peer{};
  socklen_t self_len = sizeof(self), peer_len = sizeof(peer);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&self), &self_len) < 0 ||
      ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_len) < 0)
    return false;
  return self_len == peer_len && std::memcmp(&self, &peer, self_len) == 0;
}

void UniqueFd::reset(int fd) {
  if (fd_ >= 0) ::close(fd_);  // close() is not retried on EINTR: on Linux the fd is gone either way
  fd_ = fd;
}

}  // namespace detail

// ---- timeout from the environment -----------------------------------------------------------------

namespace {

// A variable counts as set only when non-empty, so `export RANK=` clears it like `unset RANK`.
std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  return std::string(v);
}

}  // namespace

std::chrono::milliseconds default_bootstrap_timeout() {
  constexpr std::chrono::milliseconds kDefault{300'000};
  auto text = env("IRIS_BOOTSTRAP_TIMEOUT");
  if (!text) return kDefault;
  // Upper bound keeps the millisecond count far from overflow; a billion seconds is ~30 years.
  const std::optional<double> seconds = detail::parse_seconds(text->c_str());
  IRIS_CHECK_ARG(seconds && *seconds > 0 && *seconds <= 1e9, "iris bootstrap: IRIS_BOOTSTRAP_TIMEOUT='", *text,
                 "' is not a valid timeout: expected a positive number of seconds, such as 300 or 2.5");
  auto ms = static_cast<long long>(std::llround(*seconds * 1000.0));
  return std::chrono::milliseconds(std::max(1LL, ms));
}

// ---- launcher environment ---------------------------------------------------------------------------

namespace {

// One integer read from the environment, remembering where it came from for error messages.
struct EnvInt {
  std::string name;
  int value = 0;
};

int parse_int(const std::string& name, const std::string& text) {
  int value = 0;
  auto [ptr, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  IRIS_CHECK_ARG(ec == std::errc() && ptr == text.data() + text.size(), "iris bootstrap: ", name, "='", text,
                 "' is not an integer");
  return value;
}

std::optional<EnvInt> env_int(const char* name) {
  auto text = env(name);
  if (!text) return std::nullopt;
  return EnvInt{name, parse_int(name, *text)};
}

EnvInt require_int(const char* name, const char* because) {
  auto v = env_int(name);
  IRIS_CHECK_ARG(v.has_value(), "iris bootstrap: ", because, " but ", name, " is not set");
  return *v;
}

// A port number from `name`, or nothing when it is unset.
std::optional<int> env_port(const char* name) {
  auto text = env(name);
  if (!text) return std::nullopt;
  int port = 0;
  auto [ptr, ec] = std::from_chars(text->data(), text->data() + text->size(), port);
  const bool ok = ec == std::errc() && ptr == text->data() + text->size() && port >= 1 && port <= 65535;
  IRIS_CHECK_ARG(ok, "iris bootstrap: ", name, "='", *text, "' is not a port number (expected 1..65535)");
  return port;
}

// Slurm's task counts by node of the step, in node order: "4", "2(x3),1" (2, 2, 2 and 1).
std::vector<int> slurm_tasks_per_node(const char* name, const std::string& text) {
  const std::string bad = detail::str_cat("iris bootstrap: ", name, "='", text,
                                          "' is not a list of task counts (expected e.g. 4 or 2(x3),1)");
  // The number that starts at text[i] (advancing i past it), or -1 when none does.
  auto number = [&](size_t& i) {
    int value = -1;
    const auto [ptr, ec] = std::from_chars(text.data() + i, text.data() + text.size(), value);
    if (ec != std::errc() || ptr == text.data() + i || text[i] == '-' || text[i] == '+') return -1;
    i = static_cast<size_t>(ptr - text.data());
    return value;
  };
  std::vector<int> counts;
  size_t i = 0;
  for (;;) {
    const int count = number(i);
    int repeat = 1;
    if (i < text.size() && text[i] == '(') {
      IRIS_CHECK_ARG(text.compare(i, 2, "(x") == 0, bad);
      i += 2;
      repeat = number(i);
      IRIS_CHECK_ARG(i < text.size() && text[i] == ')', bad);
      ++i;
    }
    IRIS_CHECK_ARG(count >= 1 && repeat >= 1 && counts.size() + static_cast<size_t>(repeat) <= (size_t{1} << 20), bad);
    counts.insert(counts.end(), static_cast<size_t>(repeat), count);
    if (i == text.size()) return counts;
    IRIS_CHECK_ARG(text[i] == ',', bad);
    ++i;
  }
}

// The four numbers of a launch plus the names they were read from.
struct RawLaunch {
  std::string launcher;
  EnvInt rank, world;
  std::optional<EnvInt> local_rank, local_world;
};

std::optional<RawLaunch> read_torchrun() {
  auto rank = env_int("RANK");
  auto world = env_int("WORLD_SIZE");
  if (!rank && !world) return std::nullopt;
  IRIS_CHECK_ARG(rank.has_value(),
                 "iris bootstrap: WORLD_SIZE is set but RANK is not (a torchrun-style launch sets both)");
  IRIS_CHECK_ARG(world.has_value(),
                 "iris bootstrap: RANK is set but WORLD_SIZE is not (a torchrun-style launch sets both)");
  return RawLaunch{"torchrun", *rank, *world, env_int("LOCAL_RANK"), env_int("LOCAL_WORLD_SIZE")};
}

// MPICH's and Intel MPI's process manager, Hydra (mpiexec.hydra): PMI_RANK and PMI_SIZE, with this node's
// MPI_LOCALRANKID and MPI_LOCALNRANKS. Told apart by MPI_LOCALRANKID, which Hydra sets for every process: a PMI
// library of another launcher (srun --mpi=pmi2) may set PMI_RANK without saying where the node's ranks are.
std::optional<RawLaunch> read_hydra() {
  auto rank = env_int("PMI_RANK");
  auto local_rank = env_int("MPI_LOCALRANKID");
  if (!rank || !local_rank) return std::nullopt;
  EnvInt world = require_int("PMI_SIZE", "PMI_RANK is set");
  EnvInt local_world = require_int("MPI_LOCALNRANKS", "MPI_LOCALRANKID is set");
  return RawLaunch{"hydra", *rank, world, local_rank, local_world};
}

std::optional<RawLaunch> read_openmpi() {
  auto rank = env_int("OMPI_COMM_WORLD_RANK");
  if (!rank) return std::nullopt;
  EnvInt world = require_int("OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_RANK is set");
  return RawLaunch{"openmpi", *rank, world, env_int("OMPI_COMM_WORLD_LOCAL_RANK"),
                   env_int("OMPI_COMM_WORLD_LOCAL_SIZE")};
}

// The ranks of a Slurm launch are the tasks of one step that srun started: srun gives each the step's task
// count (SLURM_STEP_NUM_TASKS) and its rank in the step (SLURM_PROCID). A batch script is task 0 of the
// job's batch step, and a program it runs without srun inherits its environment: SLURM_PROCID=0 and
// SLURM_NTASKS, the allocation's task count, but no step task count. Read as rank 0 of SLURM_NTASKS, such a
// process would host a store and wait out the bootstrap timeout for ranks that never start; it is one
// process, so it runs as one rank, and `note` says why. Under srun --preserve-env (-E), SLURM_NTASKS
// can still be the allocation's: the step's count rules.
std::optional<RawLaunch> read_slurm(std::string& note) {
  auto rank = env_int("SLURM_PROCID");
  if (!rank) return std::nullopt;
  const std::optional<EnvInt> step_tasks = env_int("SLURM_STEP_NUM_TASKS");
  if (!step_tasks) {
    const std::optional<EnvInt> tasks = env_int("SLURM_NTASKS");
    note = detail::str_cat(
        "SLURM_PROCID is set but SLURM_STEP_NUM_TASKS is not: this process is not a task that srun started (a "
        "batch script, or a program it runs without srun), so it runs as a single rank",
        tasks && tasks->value > 1
            ? detail::str_cat("; to run the allocation's SLURM_NTASKS=", tasks->value, " ranks, start them with srun")
            : std::string());
    return std::nullopt;
  }
  const EnvInt& world = *step_tasks;
  // This node's task count: from the layout the step got (SLURM_STEP_TASKS_PER_NODE, SLURM_TASKS_PER_NODE;
  // this node's entry by SLURM_NODEID, else the first node's), else the requested SLURM_NTASKS_PER_NODE, which
  // a job can carry for a layout other than the one it got (--ntasks-per-node=4 with 1(x4) tasks placed).
  std::optional<EnvInt> local_world;
  for (const char* name : {"SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const auto text = env(name);
    if (!text) continue;
    const std::vector<int> counts = slurm_tasks_per_node(name, *text);
    size_t node = 0;
    if (const auto id = env_int("SLURM_NODEID")) {
      IRIS_CHECK_ARG(id->value >= 0 && static_cast<size_t>(id->value) < counts.size(),
                     "iris bootstrap: SLURM_NODEID=", id->value, " is outside the ", counts.size(), " nodes of ", name,
                     "='", *text, "'");
      node = static_cast<size_t>(id->value);
    }
    local_world = EnvInt{name, counts[node]};
    break;
  }
  if (!local_world) local_world = env_int("SLURM_NTASKS_PER_NODE");
  std::optional<EnvInt> nodes = env_int("SLURM_STEP_NUM_NODES");
  if (!nodes) nodes = env_int("SLURM_NNODES");
  if (!local_world) {
    // Without a per-node count we only know the answer when the job has a single node.
    IRIS_CHECK_ARG(!nodes || nodes->value == 1,
                   "iris bootstrap: cannot tell how many ranks run on this node: ", nodes ? nodes->name : "", "=",
                   nodes ? nodes->value : 0, " but neither SLURM_NTASKS_PER_NODE nor SLURM_TASKS_PER_NODE is set");
    local_world = EnvInt{world.name, world.value};
  }
  // Several nodes but every rank on this one: the counts describe no layout of this step (a requested
  // SLURM_NTASKS_PER_NODE where the step's own layout is missing), and every node would host its own store and
  // wait.
  IRIS_CHECK_ARG(!nodes || nodes->value <= 1 || local_world->value < world.value, "iris bootstrap: ", nodes->name, "=",
                 nodes->value, " says the job spans several nodes, but ", local_world->name, "=", local_world->value,
                 " puts all ", world.name, "=", world.value,
                 " ranks on this one; start the ranks with srun (or set RANK, WORLD_SIZE, LOCAL_RANK and "
                 "LOCAL_WORLD_SIZE)");
  return RawLaunch{"slurm", *rank, world, env_int("SLURM_LOCALID"), local_world};
}

// LaunchInfo::job: IRIS_JOB_ID, else the launcher's own name for the job (empty when it has none).
std::string job_name(const std::string& launcher) {
  if (const auto id = env("IRIS_JOB_ID")) return "IRIS_JOB_ID=" + *id;
  if (launcher == "slurm") {
    const auto job = env("SLURM_JOB_ID");
    const auto step = env("SLURM_STEP_ID");
    if (!job) return "";
    return detail::str_cat("slurm job ", *job, step ? " step " + *step : std::string());
  }
  if (launcher == "openmpi") {
    for (const char* name : {"PMIX_NAMESPACE", "OMPI_MCA_ess_base_jobid"})
      if (const auto id = env(name)) return "openmpi " + *id;
    return "";
  }
  if (launcher == "torchrun") {
    const auto id = env("TORCHELASTIC_RUN_ID");
    return id ? "torchrun " + *id : std::string();
  }
  return "";
}

}  // namespace

LaunchInfo detect_launch_info() {
  std::string note;
  std::optional<RawLaunch> raw = read_torchrun();
  if (!raw) raw = read_openmpi();
  if (!raw) raw = read_hydra();  // before Slurm: Hydra's ranks under Slurm inherit its proxies' SLURM_PROCID
  if (!raw) raw = read_slurm(note);

  LaunchInfo info;
  if (!raw) {
    info.launcher = "none";
    info.note = std::move(note);
    if (!info.note.empty()) {
      static std::once_flag once;  // callers read the environment more than once (iris-bench, create_from_env)
      std::call_once(once, [&] { IRIS_LOG_WARN("iris bootstrap: ", info.note); });
    }
    return info;  // a single rank: nothing else to read or check
  }
  info.launcher = raw->launcher;

  const EnvInt& world = raw->world;
  const EnvInt& rank = raw->rank;
  IRIS_CHECK_ARG(world.value >= 1, "iris bootstrap: ", world.name, "=", world.value, " must be at least 1");
  IRIS_CHECK_ARG(rank.value >= 0 && rank.value < world.value, "iris bootstrap: ", rank.name, "=", rank.value,
                 " is outside [0, ", world.name, "=", world.value, ")");

  // Without per-node numbers, assume one node: every rank is local.
  EnvInt local_world = raw->local_world.value_or(EnvInt{world.name, world.value});
  IRIS_CHECK_ARG(local_world.value >= 1 && local_world.value <= world.value, "iris bootstrap: ", local_world.name, "=",
                 local_world.value, " is outside [1, ", world.name, "=", world.value, "]");
  EnvInt local_rank;
  if (raw->local_rank) {
    local_rank = *raw->local_rank;
  } else {
    IRIS_CHECK_ARG(local_world.value == world.value, "iris bootstrap: ", local_world.name, "=", local_world.value,
                   " says the job spans several nodes, but the local rank is not set (",
                   raw->launcher == "torchrun"  ? "LOCAL_RANK"
                   : raw->launcher == "openmpi" ? "OMPI_COMM_WORLD_LOCAL_RANK"
                   : raw->launcher == "hydra"   ? "MPI_LOCALRANKID"
                                                : "SLURM_LOCALID",
                   ")");
    local_rank = EnvInt{rank.name, rank.value};
  }
  IRIS_CHECK_ARG(local_rank.value >= 0 && local_rank.value < local_world.value, "iris bootstrap: ", local_rank.name,
                 "=", local_rank.value, " is outside [0, ", local_world.name, "=", local_world.value, ")");

  info.job = job_name(info.launcher);
  info.rank = rank.value;
  info.world_size = world.value;
  info.local_rank = local_rank.value;
  info.local_world_size = local_world.value;

  auto addr = env("MASTER_ADDR");
  // Several nodes with the loopback default would make every node host its own store and hang.
  IRIS_CHECK_ARG(addr || local_world.value == world.value, "iris bootstrap: the job spans several nodes (", world.name,
                 "=", world.value, ", ", local_world.name, "=", local_world.value,
                 ") but MASTER_ADDR is not set; set MASTER_ADDR (and MASTER_PORT) to the address of the node running "
                 "rank 0");
  if (addr) info.master_addr = *addr;
  if (auto port = env_port("IRIS_MASTER_PORT")) {
    info.master_port = *port;
    info.master_port_source = "IRIS_MASTER_PORT";
  } else if (auto master = env_port("MASTER_PORT")) {
    info.master_port = *master;
    info.master_port_source = "MASTER_PORT";
    if (env("TORCHELASTIC_USE_AGENT_STORE") == std::optional<std::string>("True")) {
      // torchrun's agent hosts its TCPStore on MASTER_PORT (workers' init_process_group joins it), so that
      // port is taken on rank 0's node: iris's store takes the next one, which every rank computes alike.
      IRIS_CHECK_ARG(*master < 65535, "iris bootstrap: torchrun's agent serves its own store on MASTER_PORT=", *master,
                     ", and iris's store would take the port after it, which does not exist; set "
                     "IRIS_MASTER_PORT to a free port (the same on every rank)");
      info.master_port = *master + 1;
      info.master_port_source =
          detail::str_cat("MASTER_PORT + 1 (torchrun's agent serves its own store on MASTER_PORT=", *master, ")");
    }
  }
  if (info.rank == 0) {
    if (auto fd = env_int("IRIS_STORE_LISTEN_FD")) {
      IRIS_CHECK_ARG(fd->value >= 0, "iris bootstrap: IRIS_STORE_LISTEN_FD=", fd->value,
                     " is not a file descriptor (expected 0 or more)");
      info.store_listen_fd = fd->value;
    }
  }
  return info;
}

}  // namespace iris
