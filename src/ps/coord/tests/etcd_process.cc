#include "etcd_process.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <thread>
#include <vector>

namespace bx::ps::coord_test {
namespace {

// A TCP socket that no child inherits, or -1.
int LoopbackSocket() {
  return socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
}

sockaddr_in LoopbackAddress(int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(uint16_t(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return a;
}

// Whether etcd's /health says true, asked over a raw socket so that the probe does not depend
// on the client under test.
bool Healthy(int port) {
  int fd = LoopbackSocket();
  if (fd < 0) return false;
  timeval tv{1, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
  sockaddr_in a = LoopbackAddress(port);
  std::string reply;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0) {
    const std::string request = "GET /health HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    if (send(fd, request.data(), request.size(), MSG_NOSIGNAL) == ssize_t(request.size())) {
      char buf[1024];
      ssize_t n;
      while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) reply.append(buf, size_t(n));
    }
  }
  close(fd);
  return reply.find("\"health\":\"true\"") != std::string::npos;
}

}  // namespace

Result<int> PickFreePort() {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  int lo = 20000;
  const int hi = ephemeral_low - 1;
  if (hi < lo + 100) lo = 1024;  // an unusual range: take any unprivileged port below it
  if (hi < lo + 100) return Internal("no port range below " + std::to_string(ephemeral_low));
  static std::mt19937 rng{std::random_device{}()};
  std::uniform_int_distribution<int> pick(lo, hi);
  for (int i = 0; i < 200; ++i) {
    const int port = pick(rng);
    int fd = LoopbackSocket();
    if (fd < 0) return Status::FromErrno(errno, "socket");
    sockaddr_in a = LoopbackAddress(port);
    // No SO_REUSEADDR: the bind also fails while a TIME_WAIT socket holds the port.
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (free) return port;
  }
  return Unavailable("no free port found in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                     "]");
}

Result<std::unique_ptr<EtcdProcess>> EtcdProcess::Start() {
  if (access(kBinary, X_OK) != 0) {
    return FailedPrecondition(std::string(kBinary) +
                              " is missing: install etcd-server (tools/install-deps.sh)");
  }
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());  // from here on, ~EtcdProcess cleans up
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern =
      std::string(tmp && *tmp ? tmp : (access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp")) +
      "/bx-etcd-XXXXXX";
  if (mkdtemp(pattern.data()) == nullptr) return Status::FromErrno(errno, "mkdtemp " + pattern);
  etcd->dir_ = pattern;
  etcd->log_path_ = etcd->dir_ + "/etcd.log";

  // A port found free can still be taken before etcd binds it: then etcd exits, and another
  // pair of ports is tried.
  Status last;
  for (int attempt = 0; attempt < 3; ++attempt) {
    Result<int> client = PickFreePort();
    Result<int> peer = PickFreePort();
    if (!client.ok()) return client.status();
    if (!peer.ok()) return peer.status();
    if (*client == *peer) continue;
    last = etcd->Spawn(*client, *peer, attempt);
    if (last.ok()) last = etcd->WaitUntilHealthy(*client);
    if (last.ok()) {
      etcd->endpoint_ = "http://127.0.0.1:" + std::to_string(*client);
      return etcd;
    }
    if (etcd->pid_ > 0) {
      kill(etcd->pid_, SIGKILL);
      waitpid(etcd->pid_, nullptr, 0);
      etcd->pid_ = -1;
    }
    if (last.code() != StatusCode::kUnavailable) break;  // not a port race: no use retrying
  }
  return last.WithContext("starting " + std::string(kBinary) + " (log " + etcd->log_path_ +
                          "): " + etcd->LogTail());
}

Status EtcdProcess::Spawn(int client_port, int peer_port, int attempt) {
  const std::string client_url = "http://127.0.0.1:" + std::to_string(client_port);
  const std::string peer_url = "http://127.0.0.1:" + std::to_string(peer_port);
  std::vector<std::string> args = {kBinary,
                                   "--name",
                                   "default",
                                   "--data-dir",
                                   dir_ + "/data" + std::to_string(attempt),
                                   "--listen-client-urls",
                                   client_url,
                                   "--advertise-client-urls",
                                   client_url,
                                   "--listen-peer-urls",
                                   peer_url,
                                   "--initial-advertise-peer-urls",
                                   peer_url,
                                   "--initial-cluster",
                                   "default=" + peer_url};
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log < 0) return Status::FromErrno(errno, "open " + log_path_);
  const int null_in = open("/dev/null", O_RDONLY | O_CLOEXEC);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid == 0) {
    // Only async-signal-safe calls until exec. etcd dies with this process, even on a crash.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    dup2(null_in, 0);
    dup2(log, 1);
    dup2(log, 2);
    close_range(3, ~0U, 0);  // no socket or file of the test process leaks into etcd
    execv(kBinary, argv.data());
    _exit(127);
  }
  const int fork_errno = errno;
  close(log);
  if (null_in >= 0) close(null_in);
  if (pid < 0) return Status::FromErrno(fork_errno, "fork");
  pid_ = pid;
  return Status::Ok();
}

Status EtcdProcess::WaitUntilHealthy(int client_port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (std::chrono::steady_clock::now() < deadline) {
    int wstatus = 0;
    if (waitpid(pid_, &wstatus, WNOHANG) == pid_) {
      pid_ = -1;
      const bool port_taken = LogTail().find("address already in use") != std::string::npos;
      const std::string how = WIFEXITED(wstatus)
                                  ? "exited with status " + std::to_string(WEXITSTATUS(wstatus))
                                  : "was killed by signal " + std::to_string(WTERMSIG(wstatus));
      return port_taken ? Unavailable("etcd " + how + ": a port was taken")
                        : Aborted("etcd " + how);
    }
    if (Healthy(client_port)) return Status::Ok();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return DeadlineExceeded("etcd did not answer /health within 30 s");
}

std::string EtcdProcess::LogTail() const {
  std::ifstream in(log_path_, std::ios::binary);
  std::string text{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  constexpr size_t kTail = 2000;
  return text.size() > kTail ? "..." + text.substr(text.size() - kTail) : text;
}

Status EtcdProcess::Pause() {
  if (pid_ <= 0 || kill(pid_, SIGSTOP) != 0) return FailedPrecondition("etcd is not running");
  int wstatus = 0;
  while (waitpid(pid_, &wstatus, WUNTRACED) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "waitpid etcd");
  }
  if (!WIFSTOPPED(wstatus)) {
    pid_ = -1;
    return Aborted("etcd ended instead of stopping");
  }
  return Status::Ok();
}

Status EtcdProcess::Resume() {
  if (pid_ <= 0 || kill(pid_, SIGCONT) != 0) return FailedPrecondition("etcd is not running");
  int wstatus = 0;
  while (waitpid(pid_, &wstatus, WCONTINUED) < 0) {
    if (errno != EINTR) return Status::FromErrno(errno, "waitpid etcd");
  }
  if (!WIFCONTINUED(wstatus)) {
    pid_ = -1;
    return Aborted("etcd ended instead of continuing");
  }
  return Status::Ok();
}

EtcdProcess::~EtcdProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);  // also ends a paused etcd
    while (waitpid(pid_, nullptr, 0) < 0 && errno == EINTR) {
    }
  }
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

}  // namespace bx::ps::coord_test
