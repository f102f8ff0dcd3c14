#include "repeat_limiter.h"

#include <cctype>
#include <cstdio>

#include "bx/log.h"

namespace bx::tools {

RepeatLimiter::RepeatLimiter(Print print, Clock::duration period)
    : print_(std::move(print)), period_(period) {}

std::string RepeatLimiter::KindOf(std::string_view message) {
  std::string kind;
  kind.reserve(message.size());
  for (size_t i = 0; i < message.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(message[i]))) {
      kind += message[i];
    } else if (kind.empty() || kind.back() != '#') {
      kind += '#';
    }
  }
  return kind;
}

void RepeatLimiter::Report(std::string_view message, Clock::time_point now) {
  std::string kind = KindOf(message);
  std::unique_lock lock(mu_);
  auto [it, inserted] = kinds_.try_emplace(std::move(kind));
  Kind& k = it->second;
  if (inserted || (k.repeats == 0 && now - k.printed >= period_)) {
    k.printed = now;
    lock.unlock();  // printing may be slow; the next caller need not wait for it
    print_(std::string(message));
    return;
  }
  ++k.repeats;
  k.last = message;
}

void RepeatLimiter::Flush(Clock::time_point now, bool all) {
  std::vector<std::string> lines;
  {
    std::lock_guard lock(mu_);
    for (auto it = kinds_.begin(); it != kinds_.end();) {
      Kind& k = it->second;
      const auto since = now - k.printed;
      if (k.repeats > 0 && (all || since >= period_)) {
        char head[96];
        const std::string times = k.repeats == 1 ? "once" : std::to_string(k.repeats) + " times";
        std::snprintf(head, sizeof head, "repeated %s in the last %.1f s: ", times.c_str(),
                      std::chrono::duration<double>(since).count());
        lines.push_back(head + k.last);
        k.printed = now;
        k.repeats = 0;
        k.last.clear();
      }
      // A kind quiet for ten periods is forgotten, so the map stays small over a long run.
      if (k.repeats == 0 && now - k.printed >= 10 * period_) {
        it = kinds_.erase(it);
      } else {
        ++it;
      }
    }
  }
  for (const std::string& line : lines) print_(line);
}

RateLimitedStderrLog::RateLimitedStderrLog()
    // From the start of the line, over a progress line (`\r[tcp inference] ...`) left there.
    : limiter_([](const std::string& line) { std::fprintf(stderr, "\r%-72s\n", line.c_str()); }) {
  SetLogSink([this](LogLevel, std::string_view message) { limiter_.Report(message); });
  flusher_ = std::thread([this] {
    std::unique_lock lock(mu_);
    while (!cv_.wait_for(lock, std::chrono::milliseconds(200), [this] { return stop_; })) {
      limiter_.Flush();
    }
  });
}

RateLimitedStderrLog::~RateLimitedStderrLog() {
  SetLogSink(StderrLogSink());  // returns once no thread is still in ours
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  flusher_.join();
  limiter_.Flush(RepeatLimiter::Clock::now(), /*all=*/true);
}

}  // namespace bx::tools
