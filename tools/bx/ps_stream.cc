// `bx ps train --stream-keys N`: pushes N distinct keys, each once, in batches, as a training run
// over an unbounded id space does (docs/PS.md "Bounded tables"): the load that a bounded table
// must absorb by evicting, and that grew an unbounded one until it ran out of memory.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "bx/ps/client.h"
#include "ps_common.h"
#include "ps_reach.h"
#include "repeat_limiter.h"

namespace bx::tools {

bool RunStreamKeys(const ps::ClusterSpec& spec, int threads, const StreamKeysFlags& flags) {
  StopOnSigintOrSigterm();  // ends the stream early; the summary is printed as at its end
  if (spec.tables.empty()) FailPs("stream", Status(StatusCode::kInvalidArgument, "no tables"));
  const ps::TableConfig& table = spec.tables[0];
  InitPsProcess();
  ConnectedPsClient connected = ConnectPsClientOrFail(spec, "train --stream-keys");
  ps::PsClient& client = *connected.client;
  RateLimitedStderrLog log;  // failed pushes, each kind once a second

  // Batches are taken in order from one counter, so N keys go out once each whatever the
  // threads; gradient -1 everywhere (a row of SGD lr 1 from zeros then holds 1s).
  const uint64_t batch = flags.batch, batches = (flags.keys + batch - 1) / batch;
  std::atomic<uint64_t> next{0}, pushed_keys{0}, acked{0}, failed{0};
  const auto timeout = std::chrono::milliseconds(flags.push_timeout_ms);
  const auto start = std::chrono::steady_clock::now();
  std::vector<std::thread> workers;
  for (int t = 0; t < std::max(threads, 1); ++t) {
    workers.emplace_back([&] {
      std::vector<uint64_t> keys;
      std::vector<float> gradients;
      for (uint64_t b; !PsStopRequested() && (b = next.fetch_add(1)) < batches;) {
        const uint64_t first = b * batch, n = std::min(batch, flags.keys - first);
        keys.resize(n);
        for (uint64_t i = 0; i < n; ++i) keys[i] = flags.key_base + first + i;
        gradients.assign(n * table.dim, -1.0f);
        Status s = client.Push(table.id, table.dim, keys, gradients, timeout);
        (s.ok() ? acked : failed).fetch_add(1);
        if (s.ok()) pushed_keys.fetch_add(n);
        if (!s.ok())
          log.limiter().Report("push of batch " + std::to_string(b) + ": " + s.ToString());
      }
    });
  }
  for (std::thread& w : workers) w.join();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf(
      "{\"keys\": %llu, \"pushes_acked\": %llu, \"pushes_failed\": %llu, \"seconds\": %.2f, "
      "\"keys_per_second\": %.0f}\n",
      (unsigned long long)pushed_keys.load(), (unsigned long long)acked.load(),
      (unsigned long long)failed.load(), seconds, double(pushed_keys.load()) / seconds);
  std::fflush(stdout);
  return failed.load() == 0;
}

}  // namespace bx::tools
