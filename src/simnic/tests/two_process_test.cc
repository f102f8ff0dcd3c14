// Two processes bring up an RC connection over the simnic's inter-process fabric, exchanging QP
// number and GID out of band as on RoCE, and move 4 MB with RDMA WRITE + WRITE_WITH_IMM. Both
// run rc_peer, a C program built against the system verbs.h and linked with -libverbs, with the
// simnic preloaded. Both are found from this program's own path (bin/ and lib/ of its build
// tree), not compiled in: a path in the flags would give every build tree its own object, which
// a compiler cache shared between clones could never hit.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace {

// `relative` from the folder this test program is in (its build tree's bin/).
std::string BesideThisProgram(const std::string& relative) {
  char exe[4096];
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
  if (n <= 0) return relative;
  std::string path(exe, static_cast<size_t>(n));
  return path.substr(0, path.rfind('/') + 1) + relative;
}

const std::string kRcPeer = BesideThisProgram("rc_peer");
const std::string kSimnic = BesideThisProgram("../lib/libbx_simnic.so");

pid_t Spawn(const std::vector<std::string>& args, int keep_fd, const std::string& stderr_path = {},
            const std::string& extra_env = {}) {
  std::vector<char*> argv;
  for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  std::vector<std::string> env_storage;
  for (char** e = environ; *e != nullptr; ++e)
    if (std::strncmp(*e, "LD_PRELOAD=", 11) != 0 && std::strncmp(*e, "ASAN_OPTIONS=", 13) != 0)
      env_storage.emplace_back(*e);
  env_storage.push_back("LD_PRELOAD=" + kSimnic);
  // In a sanitizer build the preloaded simnic comes before libasan, which ASan would refuse;
  // the order is harmless here (the simnic allocates through the same interposed malloc).
  env_storage.push_back("ASAN_OPTIONS=verify_asan_link_order=0");
  if (!extra_env.empty()) env_storage.push_back(extra_env);
  std::vector<char*> envp;
  for (auto& e : env_storage) envp.push_back(e.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  (void)keep_fd;  // socketpair fds are created without CLOEXEC, so the child inherits them
  if (!stderr_path.empty()) {
    posix_spawn_file_actions_addopen(&actions, 2, stderr_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC,
                                     0644);
  }
  pid_t pid = -1;
  int rc = posix_spawn(&pid, args[0].c_str(), &actions, nullptr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  EXPECT_EQ(rc, 0) << "spawn " << args[0];
  return pid;
}

// Waits for `pid` up to `timeout`; kills it after that. Returns the exit status or -1.
int WaitExit(pid_t pid, std::chrono::seconds timeout) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST(TwoProcessTest, RcWriteWithImmAcrossProcesses) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  pid_t server = Spawn({kRcPeer, "server", std::to_string(fds[0])}, fds[0]);
  pid_t client = Spawn({kRcPeer, "client", std::to_string(fds[1])}, fds[1]);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(WaitExit(client, std::chrono::seconds(60)), 0);
  EXPECT_EQ(WaitExit(server, std::chrono::seconds(60)), 0);
}

// Runs the rc_peer transfer while an intruder (as `intruder_uid`, or as this user when -1) holds
// half a frame header on the server's fabric socket; the transfer must still complete.
void TransferBesideAnIntruder(int intruder_uid) {
  int fds[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
  pid_t server = Spawn({kRcPeer, "server", std::to_string(fds[0])}, fds[0]);
  pid_t intruder = -1;
  struct KillAtExit {  // a failed assertion must not leave the server or the intruder behind
    const pid_t& server;
    const pid_t& intruder;
    ~KillAtExit() {
      for (pid_t pid : {server, intruder}) {
        if (pid > 0 && waitpid(pid, nullptr, WNOHANG) == 0) {
          kill(pid, SIGKILL);
          waitpid(pid, nullptr, 0);
        }
      }
    }
  } kill_at_exit{server, intruder};
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  intruder = fork();
  if (intruder == 0) {  // as nobody: connect to the server's fabric, send half a header, hold
    close(ready[0]);
    if (intruder_uid >= 0 && (setgid(gid_t(intruder_uid)) != 0 || setuid(uid_t(intruder_uid)) != 0))
      _exit(2);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    int n = std::snprintf(address.sun_path + 1, sizeof(address.sun_path) - 1, "bxsim.%d", server);
    socklen_t length = socklen_t(offsetof(sockaddr_un, sun_path) + 1 + n);
    for (int attempt = 0; attempt < 1000; ++attempt) {
      int fd = socket(AF_UNIX, SOCK_STREAM, 0);
      if (connect(fd, reinterpret_cast<sockaddr*>(&address), length) == 0) {
        // The send fails when the server has already refused the connection: either way the
        // intruder did what it could.
        char half_header[20] = {};
        (void)send(fd, half_header, sizeof(half_header), MSG_NOSIGNAL);
        if (write(ready[1], "x", 1) != 1) _exit(4);
        pause();
      }
      close(fd);
      usleep(10000);
    }
    _exit(5);  // the server never listened
  }
  close(ready[1]);
  char c = 0;
  ASSERT_EQ(read(ready[0], &c, 1), 1) << "the intruder could not reach the server's fabric";
  close(ready[0]);
  pid_t client = Spawn({kRcPeer, "client", std::to_string(fds[1])}, fds[1]);
  close(fds[0]);
  close(fds[1]);
  EXPECT_EQ(WaitExit(client, std::chrono::seconds(60)), 0);
  EXPECT_EQ(WaitExit(server, std::chrono::seconds(60)), 0);
}

// Once the fabric's socket (@bxsim.<pid>, abstract, so without permissions) took anyone on
// the host, and 20 bytes of a frame header stalled its reader and with it all of the process's
// inter-process RDMA. A process of another user is now refused at accept.
TEST(TwoProcessTest, AnotherUsersProcessCannotStallTheFabric) {
  if (geteuid() != 0) GTEST_SKIP() << "needs root to run the intruder as another user (CI is root)";
  TransferBesideAnIntruder(65534);  // nobody
}

// A process of the same user is accepted, but the reader no longer waits for the rest of a
// frame (ipc_frame.h): half a header holds the intruder's own connection, not the fabric. The
// blocking reader it replaced timed out this transfer.
TEST(TwoProcessTest, HalfAFrameStallsOnlyItsOwnConnection) {
  TransferBesideAnIntruder(-1);
}

// Only processes given the same BX_SIM_FABRIC_COOKIE share a fabric. With the same
// cookie the transfer runs; a client with another one is refused at its connection's first
// bytes, its requests go unanswered and it fails with a completion error (transport retries
// exceeded), as another program of the same user that does not know the cookie would.
TEST(TwoProcessTest, OnlyProcessesWithTheFabricCookieShareIt) {
  auto run = [](const std::string& client_cookie, bool expect_success) {
    int fds[2];
    ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    pid_t server =
        Spawn({kRcPeer, "server", std::to_string(fds[0])}, fds[0], {}, "BX_SIM_FABRIC_COOKIE=tea");
    pid_t client = Spawn({kRcPeer, "client", std::to_string(fds[1])}, fds[1], "/dev/null",
                         "BX_SIM_FABRIC_COOKIE=" + client_cookie);
    close(fds[0]);
    close(fds[1]);
    int client_status = WaitExit(client, std::chrono::seconds(60));
    if (expect_success) {
      EXPECT_EQ(client_status, 0);
      EXPECT_EQ(WaitExit(server, std::chrono::seconds(60)), 0);
    } else {
      EXPECT_EQ(client_status, 1) << "the client should fail with a completion error";
      WaitExit(server, std::chrono::seconds(0));  // its peer never came: stopped
    }
  };
  run("tea", true);
  run("coffee", false);
}

// Copies bytes both ways between two sockets until both are closed.
void Relay(int a, int b) {
  pollfd fds[2] = {{a, POLLIN, 0}, {b, POLLIN, 0}};
  int open = 2;
  while (open > 0 && poll(fds, 2, -1) > 0) {
    for (int i = 0; i < 2; ++i) {
      if (fds[i].fd < 0 || fds[i].revents == 0) continue;
      char buffer[256];
      ssize_t n = read(fds[i].fd, buffer, sizeof buffer);
      if (n <= 0 ||
          write(fds[1 - i].fd >= 0 ? fds[1 - i].fd : (i == 0 ? b : a), buffer, size_t(n)) != n) {
        fds[i].fd = -1;
        --open;
      }
    }
  }
}

// BX_SIM_PARTITIONS cuts the fabric between two processes as a switch dropping their packets
// would: the client's RDMA WRITE gets no response, is retried after each ACK timeout and
// completes with a retry-exceeded error (about 0.5 s with rc_peer's timeout 14 and
// retry_cnt 7), instead of arriving. The peers swap their QP details through this process,
// which writes the cut before passing them on, so no packet can cross first.
TEST(TwoProcessTest, APartitionFileCutsTheFabricBetweenTwoProcesses) {
  char dir[] = "/tmp/bx-partitions.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string cuts = std::string(dir) + "/cuts", err = std::string(dir) + "/client.err";
  ASSERT_EQ(setenv("BX_SIM_PARTITIONS", cuts.c_str(), 1), 0);
  int to_server[2], to_client[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, to_server), 0);
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_STREAM, 0, to_client), 0);
  pid_t server = Spawn({kRcPeer, "server", std::to_string(to_server[0])}, to_server[0]);
  pid_t client = Spawn({kRcPeer, "client", std::to_string(to_client[0])}, to_client[0], err);
  unsetenv("BX_SIM_PARTITIONS");
  close(to_server[0]);
  close(to_client[0]);
  { std::ofstream(cuts) << "# cut by the test\n" << server << " " << client << "\n"; }
  std::thread relay(Relay, to_server[1], to_client[1]);
  EXPECT_EQ(WaitExit(client, std::chrono::seconds(60)), 1) << "the write crossed the cut";
  std::stringstream client_err;
  client_err << std::ifstream(err).rdbuf();
  EXPECT_NE(client_err.str().find("retry"), std::string::npos) << client_err.str();
  kill(server, SIGKILL);  // it waits for a write that never comes
  WaitExit(server, std::chrono::seconds(10));
  shutdown(to_server[1], SHUT_RDWR);
  shutdown(to_client[1], SHUT_RDWR);
  relay.join();
  close(to_server[1]);
  close(to_client[1]);
  std::remove(cuts.c_str());
  std::remove(err.c_str());
  rmdir(dir);
}

// The per-process sysfs directory (device_sysfs.h): a process removes its own at exit, and
// those of processes that died without exiting, but not a live process's.
TEST(TwoProcessTest, SysfsDirectoriesGoWithTheirProcesses) {
  char dir[] = "/tmp/bx-sysfs-test.XXXXXX";
  ASSERT_NE(mkdtemp(dir), nullptr);
  const std::string dead = std::string(dir) + "/bxsim-sysfs.4194305";  // above any pid_max
  const std::string live = std::string(dir) + "/bxsim-sysfs." + std::to_string(getpid());
  for (const std::string& d : {dead, live}) {
    ASSERT_EQ(mkdir(d.c_str(), 0700), 0);
    std::ofstream(d + "/left") << "x\n";
  }
  ASSERT_EQ(setenv("BX_SIM_SYSFS_DIR", dir, 1), 0);
  pid_t both = Spawn({kRcPeer, "both"}, -1);
  unsetenv("BX_SIM_SYSFS_DIR");
  EXPECT_EQ(WaitExit(both, std::chrono::seconds(60)), 0);
  struct stat st {};
  EXPECT_NE(stat(dead.c_str(), &st), 0) << "a dead process's directory stayed";
  EXPECT_EQ(stat(live.c_str(), &st), 0) << "a live process's directory was removed";
  const std::string own = std::string(dir) + "/bxsim-sysfs." + std::to_string(both);
  EXPECT_NE(stat(own.c_str(), &st), 0) << "the exited process left its directory";
  std::remove((live + "/left").c_str());
  rmdir(live.c_str());
  rmdir(dir);
}

TEST(AbiTest, SystemLinkedProgramRunsOverThePreloadedSimnic) {
  pid_t both = Spawn({kRcPeer, "both"}, -1);
  EXPECT_EQ(WaitExit(both, std::chrono::seconds(60)), 0);
}

}  // namespace
