// Message, ReplicaAddress and LatencyHistogram: the plain values of include/bx/rpc.h.
#include <algorithm>
#include <charconv>
#include <cstring>
#include <vector>

#include "base/log_linear_buckets.h"
#include "bx/rpc.h"
#include "rpc/frame.h"

namespace bx::rpc {

static_assert(Message::kHeaderBytes == kFrameHeaderBytes);

Result<Message> Message::Allocate(size_t size) {
  BX_ASSIGN_OR_RETURN(Buffer buffer, Buffer::Allocate(kHeaderBytes + size));
  return Message(std::move(buffer));
}

Result<Message> Message::CopyOf(std::string_view bytes) {
  BX_ASSIGN_OR_RETURN(Message message, Allocate(bytes.size()));
  if (!bytes.empty()) std::memcpy(message.data(), bytes.data(), bytes.size());
  return message;
}

bool Message::Resize(size_t size) {
  if (!buffer_ || kHeaderBytes + size > buffer_.capacity()) return false;
  buffer_.Resize(kHeaderBytes + size);
  return true;
}

namespace {

bool ValidUrl(std::string_view url, std::string_view scheme) {
  Result<Url> parsed = ParseUrl(url);
  return parsed.ok() && parsed->scheme == scheme;
}

}  // namespace

Result<ReplicaAddress> ReplicaAddress::Parse(std::string_view text) {
  ReplicaAddress address;
  size_t comma = text.find(',');
  if (comma == std::string_view::npos) {
    // A single url: a replica reachable over one transport only.
    if (text.starts_with("rdma://")) {
      address.rdma_url = std::string(text);
    } else {
      address.tcp_url = std::string(text);
    }
  } else if (text.find("://") == std::string_view::npos) {
    // "host:rdma_port,tcp_port"
    std::string_view first = text.substr(0, comma);
    size_t colon = first.rfind(':');
    if (colon == std::string_view::npos) {
      return InvalidArgument("replica address '" + std::string(text) +
                             "': expected host:rdma_port,tcp_port");
    }
    std::string host(first.substr(0, colon));
    address.rdma_url = "rdma://" + host + ":" + std::string(first.substr(colon + 1));
    address.tcp_url = "tcp://" + host + ":" + std::string(text.substr(comma + 1));
  } else {
    for (std::string_view part : {text.substr(0, comma), text.substr(comma + 1)}) {
      if (part.starts_with("rdma://")) {
        address.rdma_url = std::string(part);
      } else {
        address.tcp_url = std::string(part);
      }
    }
  }
  if (!address.rdma_url.empty() && !ValidUrl(address.rdma_url, "rdma")) {
    return InvalidArgument("replica address '" + std::string(text) + "': bad rdma url");
  }
  if (!address.tcp_url.empty() && !ValidUrl(address.tcp_url, "tcp")) {
    return InvalidArgument("replica address '" + std::string(text) + "': bad tcp url");
  }
  if (address.rdma_url.empty() && address.tcp_url.empty()) {
    return InvalidArgument("replica address '" + std::string(text) + "' names no url");
  }
  return address;
}

std::string ReplicaAddress::ToString() const {
  if (rdma_url.empty()) return tcp_url;
  if (tcp_url.empty()) return rdma_url;
  return rdma_url + "," + tcp_url;
}

std::string_view ReplicaStateName(ReplicaState state) {
  switch (state) {
    case ReplicaState::kConnecting:
      return "connecting";
    case ReplicaState::kUp:
      return "up";
    case ReplicaState::kDown:
      return "down";
  }
  return "?";
}

namespace {

// Octave k (k >= 0) holds [2^k, 2^(k+1)) microseconds in 8 sub-buckets.
constexpr LogLinearBuckets kLatencyBuckets(/*min_exponent=*/0, /*octaves=*/42, /*sub_buckets=*/8);

// The upper edge of every bucket, computed once.
const std::vector<double>& LatencyUpperBounds() {
  static const std::vector<double> bounds = kLatencyBuckets.UpperBounds();
  return bounds;
}

}  // namespace

void LatencyHistogram::Record(std::chrono::nanoseconds latency) {
  static_assert(kLatencyBuckets.size() == kBuckets);
  double us_exact = std::max<double>(0, latency.count() / 1000.0);
  // Whole microseconds, at least 1: what is below 1 us counts in the first bucket, [1, 1.125).
  uint64_t us = std::max<uint64_t>(1, static_cast<uint64_t>(us_exact));
  ++buckets_[kLatencyBuckets.IndexOf(double(us))];
  ++count_;
  sum_us_ += us_exact;
  max_us_ = std::max(max_us_, us_exact);
}

void LatencyHistogram::Merge(const LatencyHistogram& other) {
  for (int i = 0; i < kBuckets; ++i) buckets_[i] += other.buckets_[i];
  count_ += other.count_;
  sum_us_ += other.sum_us_;
  max_us_ = std::max(max_us_, other.max_us_);
}

double LatencyHistogram::PercentileUs(double fraction) const {
  if (count_ == 0) return 0;
  // The upper edge, capped by the largest latency seen (the overflow bucket's edge is infinite).
  return std::min(max_us_, PercentileOfBuckets(buckets_, LatencyUpperBounds(), fraction,
                                               BucketPercentile::kUpperEdge));
}

}  // namespace bx::rpc
