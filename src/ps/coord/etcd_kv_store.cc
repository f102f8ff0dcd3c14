// The etcd KvStore: etcd v3's JSON gateway (grpc-gateway) over plain HTTP with libcurl. Each
// method is one POST; keys and values travel base64-encoded, int64 fields as JSON strings, and
// proto3 JSON leaves out fields holding their default (false, 0, empty), so absent means that.
#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <charconv>
#include <mutex>
#include <nlohmann/json.hpp>
#include <string_view>
#include <vector>

#include "ps/coord/kv_store.h"

namespace bx::ps {
namespace {

using nlohmann::json;

// --- base64 (RFC 4648 standard alphabet, padded), the encoding of protobuf bytes in JSON ---

constexpr std::string_view kBase64Alphabet =
    "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

std::string Base64Encode(std::string_view in) {
  std::string out;
  out.reserve((in.size() + 2) / 3 * 4);
  for (size_t i = 0; i < in.size(); i += 3) {
    const size_t n = std::min<size_t>(3, in.size() - i);
    uint32_t group = 0;  // up to 24 bits, left-aligned
    for (size_t j = 0; j < n; ++j) group |= uint32_t(uint8_t(in[i + j])) << (16 - 8 * j);
    for (size_t j = 0; j < 4; ++j) {
      out += j <= n ? kBase64Alphabet[(group >> (18 - 6 * j)) & 63] : '=';
    }
  }
  return out;
}

std::optional<std::string> Base64Decode(std::string_view in) {
  if (in.size() % 4 != 0) return std::nullopt;
  std::string out;
  out.reserve(in.size() / 4 * 3);
  for (size_t i = 0; i < in.size(); i += 4) {
    uint32_t group = 0;
    int pad = 0;
    for (size_t j = 0; j < 4; ++j) {
      const char c = in[i + j];
      uint32_t v = 0;
      if (c == '=' && j >= 2 && i + 4 == in.size()) {
        ++pad;
      } else {
        const size_t pos = kBase64Alphabet.find(c);
        if (pos == std::string_view::npos || pad > 0) return std::nullopt;  // data after '='
        v = uint32_t(pos);
      }
      group = group << 6 | v;
    }
    for (int j = 0; j < 3 - pad; ++j) out += char((group >> (16 - 8 * j)) & 0xff);
  }
  return out;
}

// --- JSON fields ---

// An int64 field: etcd writes them as strings ("12"); absent means 0.
Result<int64_t> Int64Field(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return int64_t{0};
  if (it->is_number_integer()) return it->get<int64_t>();
  if (it->is_string()) {
    const std::string& s = it->get_ref<const std::string&>();
    int64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec == std::errc() && end == s.data() + s.size() && !s.empty()) return v;
  }
  return DataLoss(std::string("field '") + name + "' is not an int64: " + it->dump());
}

Result<std::string> BytesField(const json& obj, const char* name) {
  auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return std::string();
  if (it->is_string()) {
    if (auto bytes = Base64Decode(it->get_ref<const std::string&>())) return *std::move(bytes);
  }
  return DataLoss(std::string("field '") + name + "' is not base64: " + it->dump());
}

// --- endpoint ---

// Checks "http://host:port" (host may be a bracketed IPv6 address); returns it without a
// trailing '/'.
Result<std::string> NormalizeEndpoint(const std::string& endpoint) {
  auto bad = [&](std::string_view why) {
    return InvalidArgument("etcd endpoint '" + endpoint + "': " + std::string(why));
  };
  std::string_view rest = endpoint;
  if (rest.starts_with("https://")) {
    return bad("https is not supported (no TLS client); give the plain http://host:port URL");
  }
  if (!rest.starts_with("http://")) return bad("expected http://host:port");
  rest.remove_prefix(7);
  if (rest.ends_with('/')) rest.remove_suffix(1);
  if (rest.find_first_of("/?#@") != std::string_view::npos) {
    return bad("expected http://host:port, without a path, query or user");
  }
  size_t colon = rest.rfind(':');
  if (colon == std::string_view::npos) return bad("no port (expected http://host:port)");
  std::string_view host = rest.substr(0, colon);
  std::string_view port = rest.substr(colon + 1);
  const bool bracketed = host.starts_with('[') && host.ends_with(']');
  if (host.empty() || host == "[]" || (!bracketed && host.find(':') != std::string_view::npos)) {
    return bad("bad host (expected http://host:port, IPv6 in brackets)");
  }
  int port_number = 0;
  auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), port_number);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || port_number < 1 ||
      port_number > 65535) {
    return bad("bad port '" + std::string(port) + "'");
  }
  return "http://" + std::string(rest);
}

// --- errors ---

// etcd answers errors with a gRPC status code; this is bx's closest code.
StatusCode FromGrpcCode(int64_t code) {
  switch (code) {
    case 3:   // INVALID_ARGUMENT
    case 11:  // OUT_OF_RANGE (e.g. a compacted revision)
      return StatusCode::kInvalidArgument;
    case 5:  // NOT_FOUND (e.g. "requested lease not found")
      return StatusCode::kNotFound;
    case 4:
      return StatusCode::kDeadlineExceeded;
    case 8:
      return StatusCode::kResourceExhausted;
    case 6:   // ALREADY_EXISTS
    case 9:   // FAILED_PRECONDITION
    case 7:   // PERMISSION_DENIED
    case 16:  // UNAUTHENTICATED
      return StatusCode::kFailedPrecondition;
    case 1:   // CANCELLED
    case 10:  // ABORTED
      return StatusCode::kAborted;
    case 12:
      return StatusCode::kUnimplemented;
    case 15:
      return StatusCode::kDataLoss;
    case 13:
      return StatusCode::kInternal;
    default:  // 2 UNKNOWN, 14 UNAVAILABLE and anything new: the request may be retried
      return StatusCode::kUnavailable;
  }
}

// The error an answer carries, if any: a failed unary call answers {"error","message","code"}, a
// failed streaming one (keepalive) {"error":{"grpc_code","message",...}}.
std::optional<Status> ErrorInAnswer(const json& answer) {
  if (!answer.is_object()) return std::nullopt;
  auto error = answer.find("error");
  if (error == answer.end()) return std::nullopt;
  const bool streamed = error->is_object();
  const json& fields = streamed ? *error : answer;
  auto code = fields.find(streamed ? "grpc_code" : "code");
  auto message = fields.find("message");
  const int64_t grpc_code =
      code != fields.end() && code->is_number_integer() ? code->get<int64_t>() : 2;
  std::string text =
      message != fields.end() && message->is_string() ? message->get<std::string>() : error->dump();
  return Status(FromGrpcCode(grpc_code), std::move(text));
}

// --- libcurl ---

Status InitCurlOnce() {
  static std::once_flag once;
  static CURLcode rc = CURLE_OK;
  std::call_once(once, [] { rc = curl_global_init(CURL_GLOBAL_DEFAULT); });
  if (rc != CURLE_OK) return Internal(std::string("curl_global_init: ") + curl_easy_strerror(rc));
  return Status::Ok();
}

size_t AppendToString(char* data, size_t size, size_t count, void* out) {
  static_cast<std::string*>(out)->append(data, size * count);
  return size * count;
}

// Every member of the etcd cluster it was given; requests go to one at a time, and move to the
// next when that one does not answer (killed, paused, cut off), as etcd's own clients do.
class EtcdKvStore final : public KvStore {
 public:
  EtcdKvStore(std::vector<std::string> endpoints, std::chrono::milliseconds timeout)
      : endpoints_(std::move(endpoints)), timeout_(timeout) {
    // An empty "Expect:" stops curl waiting for "100 Continue" before larger bodies.
    headers_ = curl_slist_append(headers_, "Content-Type: application/json");
    headers_ = curl_slist_append(headers_, "Expect:");
  }

  ~EtcdKvStore() override {
    for (CURL* h : idle_) curl_easy_cleanup(h);
    curl_slist_free_all(headers_);
  }

  Result<std::optional<KvEntry>> Get(const std::string& key) override {
    BX_ASSIGN_OR_RETURN(json answer, Call("/v3/kv/range", {{"key", Base64Encode(key)}}));
    auto kvs = answer.find("kvs");
    if (kvs == answer.end() || !kvs->is_array() || kvs->empty()) {
      return std::optional<KvEntry>();
    }
    const json& kv = kvs->front();
    Result<std::string> value = BytesField(kv, "value");
    Result<int64_t> mod = Int64Field(kv, "mod_revision");
    Result<int64_t> create = Int64Field(kv, "create_revision");
    Result<int64_t> lease = Int64Field(kv, "lease");
    for (const Status* s : {&value.status(), &mod.status(), &create.status(), &lease.status()}) {
      if (!s->ok()) return s->WithContext(Where("/v3/kv/range"));
    }
    return std::optional<KvEntry>(KvEntry{std::move(value).value(), *mod, *create, *lease});
  }

  Result<bool> Commit(std::span<const KvCompare> compares, std::span<const KvPut> puts) override {
    json compare = json::array();
    for (const KvCompare& c : compares) {
      const bool mod = c.target == KvCompare::Target::kMod;
      compare.push_back({{"key", Base64Encode(c.key)},
                         {"target", mod ? "MOD" : "CREATE"},
                         {"result", "EQUAL"},
                         {mod ? "mod_revision" : "create_revision", std::to_string(c.revision)}});
    }
    json success = json::array();
    for (const KvPut& p : puts) {
      json put = {{"key", Base64Encode(p.key)}, {"value", Base64Encode(p.value)}};
      if (p.lease != 0) put["lease"] = std::to_string(p.lease);
      success.push_back({{"request_put", std::move(put)}});
    }
    BX_ASSIGN_OR_RETURN(json answer,
                        Call("/v3/kv/txn", {{"compare", compare}, {"success", success}}));
    auto succeeded = answer.find("succeeded");
    return succeeded != answer.end() && succeeded->is_boolean() && succeeded->get<bool>();
  }

  Result<KvLease> GrantLease(std::chrono::milliseconds ttl) override {
    if (ttl.count() <= 0) return InvalidArgument("etcd grant lease: ttl must be positive");
    const int64_t seconds = (ttl.count() + 999) / 1000;  // etcd counts whole seconds
    BX_ASSIGN_OR_RETURN(json answer, Call("/v3/lease/grant", {{"TTL", seconds}}));
    Result<int64_t> id = Int64Field(answer, "ID");
    Result<int64_t> granted = Int64Field(answer, "TTL");
    if (!id.ok()) return id.status().WithContext(Where("/v3/lease/grant"));
    if (!granted.ok()) return granted.status().WithContext(Where("/v3/lease/grant"));
    if (*id == 0 || *granted <= 0) {
      return DataLoss(Where("/v3/lease/grant") + ": no lease in the answer " + answer.dump());
    }
    return KvLease{*id, std::chrono::seconds(*granted)};
  }

  Result<std::chrono::milliseconds> KeepAlive(int64_t lease) override {
    BX_ASSIGN_OR_RETURN(json answer, Call("/v3/lease/keepalive", {{"ID", std::to_string(lease)}}));
    auto result = answer.find("result");
    if (result == answer.end() || !result->is_object()) {
      return DataLoss(Where("/v3/lease/keepalive") + ": no result in the answer " + answer.dump());
    }
    Result<int64_t> ttl = Int64Field(*result, "TTL");
    if (!ttl.ok()) return ttl.status().WithContext(Where("/v3/lease/keepalive"));
    // etcd renews an expired or unknown lease by answering TTL 0, which JSON leaves out.
    if (*ttl <= 0) {
      return NotFound(Where("/v3/lease/keepalive") + ": lease " + std::to_string(lease) +
                      " not found (expired or revoked)");
    }
    return std::chrono::milliseconds(std::chrono::seconds(*ttl));
  }

  Status RevokeLease(int64_t lease) override {
    Result<json> answer = Call("/v3/lease/revoke", {{"ID", std::to_string(lease)}});
    if (!answer.ok() && answer.status().code() == StatusCode::kNotFound &&
        answer.status().message().find("requested lease not found") != std::string::npos) {
      return Status::Ok();  // already expired or revoked: its keys are gone, as asked
    }
    return answer.status();
  }

  std::string Describe() const override {
    std::string all;
    for (const std::string& e : endpoints_) all += (all.empty() ? "" : ",") + e;
    return "etcd " + all;
  }

 private:
  std::string Where(const char* path) const {
    return "etcd " + endpoints_[current_.load(std::memory_order_relaxed)] + path;
  }

  // Call on the current member. One that could not be reached (the request never left: refused,
  // or no connection within the connect timeout) gives way to the next at once; one that took
  // the request and gave no answer ends the call (its outcome is unknown: the caller re-reads),
  // and the next call starts at the next member.
  Result<json> Call(const char* path, const json& request) {
    const size_t first = current_.load(std::memory_order_relaxed);
    Result<json> answer = Unavailable("etcd: no endpoint");
    for (size_t attempt = 0; attempt < endpoints_.size(); ++attempt) {
      const size_t index = (first + attempt) % endpoints_.size();
      bool sent = true;
      answer = CallMember(endpoints_[index], path, request, &sent);
      const bool answered =
          answer.ok() || (answer.status().code() != StatusCode::kUnavailable &&
                          answer.status().code() != StatusCode::kDeadlineExceeded);
      if (answered) {
        current_.store(index, std::memory_order_relaxed);
        return answer;
      }
      current_.store((index + 1) % endpoints_.size(), std::memory_order_relaxed);
      if (sent) return answer;
    }
    return answer;
  }

  // POSTs `request` to `path` on `endpoint`; etcd's JSON answer, or the error etcd or the
  // transport gave. *sent is false when the request cannot have reached the member.
  Result<json> CallMember(const std::string& endpoint, const char* path, const json& request,
                          bool* sent) {
    auto where = [&](const char* p) { return "etcd " + endpoint + p; };
    const std::string url = endpoint + path;
    const std::string body = request.dump();
    std::string reply;
    char curl_error[CURL_ERROR_SIZE] = "";
    CURL* h = TakeHandle();
    if (h == nullptr) return Internal(where(path) + ": curl_easy_init failed");
    curl_easy_setopt(h, CURLOPT_URL, url.c_str());
    curl_easy_setopt(h, CURLOPT_POST, 1L);
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body.data());
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE, curl_off_t(body.size()));
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, headers_);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, AppendToString);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, &reply);
    curl_easy_setopt(h, CURLOPT_ERRORBUFFER, curl_error);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);  // no SIGALRM for timeouts in a threaded process
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, long(timeout_.count()));
    // A member that does not take a connection within a second is down or cut off: the next
    // one is tried rather than waiting out the whole timeout.
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, long(std::min<int64_t>(timeout_.count(), 1000)));
    curl_easy_setopt(h, CURLOPT_NOPROXY, "*");  // CI machines export http_proxy
    const CURLcode rc = curl_easy_perform(h);
    long http_status = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http_status);
    curl_off_t connected_us = 0;
    curl_easy_getinfo(h, CURLINFO_CONNECT_TIME_T, &connected_us);
    *sent = rc == CURLE_OK ||
            (rc != CURLE_COULDNT_CONNECT && rc != CURLE_COULDNT_RESOLVE_HOST && connected_us > 0);
    GiveBackHandle(h);

    if (rc != CURLE_OK) {
      std::string detail = curl_error[0] != '\0' ? curl_error : curl_easy_strerror(rc);
      if (rc == CURLE_OPERATION_TIMEDOUT) {
        return DeadlineExceeded(where(path) + ": no answer within " +
                                std::to_string(timeout_.count()) + " ms (" + detail + ")");
      }
      return Unavailable(where(path) + ": " + detail);
    }
    json answer = json::parse(reply, nullptr, /*allow_exceptions=*/false);
    if (answer.is_discarded()) {
      // A stream's answer is one JSON object per line: keepalive sends one request, so one.
      answer = json::parse(reply.substr(0, reply.find('\n')), nullptr, false);
    }
    if (!answer.is_discarded()) {
      if (std::optional<Status> error = ErrorInAnswer(answer)) {
        return error->WithContext(where(path));
      }
    }
    if (http_status != 200) {
      return Unavailable(where(path) + ": HTTP " + std::to_string(http_status) + ": " +
                         reply.substr(0, 200));
    }
    if (answer.is_discarded() || !answer.is_object()) {
      return DataLoss(where(path) + ": the answer is not a JSON object: " + reply.substr(0, 200));
    }
    return answer;
  }

  // Handles are kept between calls so that their connections to etcd are reused.
  CURL* TakeHandle() {
    {
      std::lock_guard lock(mu_);
      if (!idle_.empty()) {
        CURL* h = idle_.back();
        idle_.pop_back();
        curl_easy_reset(h);  // options only: the connection cache stays
        return h;
      }
    }
    return curl_easy_init();
  }

  void GiveBackHandle(CURL* h) {
    static constexpr size_t kMaxIdle = 8;
    std::lock_guard lock(mu_);
    if (idle_.size() < kMaxIdle) {
      idle_.push_back(h);
    } else {
      curl_easy_cleanup(h);
    }
  }

  const std::vector<std::string> endpoints_;
  std::atomic<size_t> current_{0};  // the member requests go to first
  const std::chrono::milliseconds timeout_;
  curl_slist* headers_ = nullptr;  // read-only once built: shared by concurrent calls
  std::mutex mu_;
  std::vector<CURL*> idle_;
};

}  // namespace

Result<std::unique_ptr<KvStore>> OpenEtcdKvStore(const std::string& endpoints,
                                                 std::chrono::milliseconds timeout) {
  std::vector<std::string> members;
  std::string_view rest = endpoints;
  while (true) {
    const size_t comma = rest.find(',');
    BX_ASSIGN_OR_RETURN(std::string normalized,
                        NormalizeEndpoint(std::string(rest.substr(0, comma))));
    if (std::find(members.begin(), members.end(), normalized) != members.end()) {
      return InvalidArgument("etcd endpoints '" + endpoints + "': " + normalized + " twice");
    }
    members.push_back(std::move(normalized));
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  if (timeout.count() <= 0) {
    return InvalidArgument("etcd endpoint '" + endpoints + "': timeout must be positive");
  }
  BX_RETURN_IF_ERROR(InitCurlOnce());
  return std::unique_ptr<KvStore>(new EtcdKvStore(std::move(members), timeout));
}

}  // namespace bx::ps
