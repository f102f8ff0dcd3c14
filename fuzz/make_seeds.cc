// Writes the seed corpora in fuzz/corpus/<target>/ from the project's own encoders, so the seeds
// follow the wire formats when they change. Run by `make fuzz-corpus`; the files are checked in.
//
//   fuzz_make_seeds <corpus dir>
#include <arpa/inet.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <string_view>
#include <vector>

#include "engine/wire.h"
#include "ps/shard_state.h"
#include "ps/wire.h"
#include "rpc/frame.h"
#include "simnic/ipc_frame.h"
#include "transport/rdma/bootstrap.h"
#include "transport/tcp/frame.h"
#include "transport/tcp/handshake.h"

namespace {

using Bytes = std::vector<uint8_t>;
namespace fs = std::filesystem;

void Write(const fs::path& dir, const std::string& name, const Bytes& bytes) {
  fs::create_directories(dir);
  std::ofstream out(dir / name, std::ios::binary | std::ios::trunc);
  out.write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

Bytes HelloBytes(const bx::rdma::Hello& h) {
  Bytes b(64);
  bx::rdma::EncodeHello(h, b.data());
  return b;
}

void Put32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = uint8_t(v >> (8 * i));
}

void BootstrapSeeds(const fs::path& dir) {
  bx::rdma::Hello h;
  h.qp_num = 0x123;
  h.gid.raw[0] = 0xfe;
  h.gid.raw[1] = 0x80;
  h.recv_queue_depth = 64;
  h.eager_limit = 16 << 10;
  h.max_message_bytes = 1ull << 30;
  h.psn = 0x4242;
  Bytes valid = HelloBytes(h);
  Bytes with_ready = valid;
  with_ready.push_back(bx::rdma::kReady);
  Write(dir, "hello_then_ready", with_ready);
  Write(dir, "hello_only", valid);
  Bytes wrong_ready = valid;
  wrong_ready.push_back('X');
  Write(dir, "hello_then_wrong_ready", wrong_ready);
  Write(dir, "truncated", Bytes(valid.begin(), valid.begin() + 40));
  Bytes bad_magic = valid;
  bad_magic[0] ^= 0xff;
  Write(dir, "bad_magic", bad_magic);
  Bytes bad_version = valid;
  bad_version[4] = 9;
  Write(dir, "bad_version", bad_version);
  Bytes qpn_zero = valid;
  Put32(qpn_zero, 8, 0);
  Write(dir, "qp_number_zero", qpn_zero);
  Bytes deep = valid;
  Put32(deep, 32, bx::rdma::kMaxRecvQueueDepth + 1);
  Write(dir, "queue_too_deep", deep);
  Bytes eager = valid;
  Put32(eager, 36, bx::rdma::kMaxEagerLimit + 1);
  Write(dir, "eager_too_big", eager);
  // Version 3: an authenticating Hello (flag) is followed by the client's 32-byte nonce.
  h.auth = true;
  Bytes with_nonce = HelloBytes(h);
  for (int i = 0; i < 32; ++i) with_nonce.push_back(uint8_t(0xa0 + i));
  Write(dir, "hello_auth_then_nonce", with_nonce);
  Bytes unknown_flag = valid;
  unknown_flag[6] = 0x02;
  Write(dir, "hello_unknown_flag", unknown_flag);
  // Version 4: an InfiniBand peer addressed by LID; a link layer and an MTU out of range.
  h.auth = false;
  h.link_layer = IBV_LINK_LAYER_INFINIBAND;
  h.lid = 0x12;
  h.mtu = IBV_MTU_4096;
  Write(dir, "hello_infiniband", HelloBytes(h));
  h.lid = 0;
  Bytes no_lid = HelloBytes(h);
  Write(dir, "hello_infiniband_without_lid", no_lid);
  Bytes bad_link = valid;
  bad_link[50] = 7;
  Write(dir, "hello_unknown_link_layer", bad_link);
  Bytes bad_mtu = valid;
  bad_mtu[51] = 9;
  Write(dir, "hello_bad_mtu", bad_mtu);
}

Bytes FrameBytes(uint64_t length) {
  auto header = bx::tcp::EncodeFrameHeader(length);
  Bytes b(header.size());
  std::memcpy(b.data(), header.data(), header.size());
  return b;
}

void FrameSeeds(const fs::path& dir) {
  Write(dir, "empty_payload", FrameBytes(0));
  Write(dir, "one_kib", FrameBytes(1024));
  Bytes limit = FrameBytes(4096);
  for (int i = 0; i < 8; ++i) limit.push_back(uint8_t((4096ull >> (8 * i)) & 0xff));
  Write(dir, "at_explicit_limit", limit);
  Write(dir, "above_default_limit", FrameBytes((1ull << 30) + 1));
  Bytes flags = FrameBytes(10);
  flags[5] = 1;
  Write(dir, "unknown_flag", flags);
  Bytes version = FrameBytes(10);
  version[4] = 2;
  Write(dir, "unknown_version", version);
}

Bytes ImmBytes(bx::engine::Kind kind, uint16_t credits, uint16_t id, const void* payload,
               size_t length) {
  uint32_t wire = htonl(bx::engine::EncodeImm({kind, credits, id}));
  Bytes b(4 + length);
  std::memcpy(b.data(), &wire, 4);
  if (length > 0) std::memcpy(b.data() + 4, payload, length);
  return b;
}

void EngineSeeds(const fs::path& dir) {
  using namespace bx::engine;
  const char eager[] = "hello";
  Write(dir, "eager", ImmBytes(Kind::kEager, 3, 1, eager, sizeof(eager)));
  Write(dir, "credit", ImmBytes(Kind::kCredit, kMaxCreditsPerImm, 0, nullptr, 0));
  RendezvousRequest request{1 << 20, 1, {}};
  Write(dir, "rendezvous_request",
        ImmBytes(Kind::kRendezvousRequest, 0, 7, &request, sizeof(request)));
  RendezvousReply reply{0x7f0000001000, 0x1234, 0};
  Write(dir, "rendezvous_reply", ImmBytes(Kind::kRendezvousReply, 0, 7, &reply, sizeof(reply)));
  Write(dir, "rendezvous_done", ImmBytes(Kind::kRendezvousDone, 0, 7, nullptr, 0));
  RemoteWriteDone done{1, 9, 0};
  Write(dir, "remote_write_done", ImmBytes(Kind::kRemoteWriteDone, 0, 0, &done, sizeof(done)));
  Write(dir, "short_request", ImmBytes(Kind::kRendezvousRequest, 0, 7, &request, 4));
  Write(dir, "unknown_kind", ImmBytes(Kind(15), 0, 0, nullptr, 0));
}

void HttpSeeds(const fs::path& dir) {
  auto text = [](std::string_view s) { return Bytes(s.begin(), s.end()); };
  Write(dir, "get_metrics", text("GET /metrics HTTP/1.1\r\nHost: node1:9100\r\nAccept: */*"));
  Write(dir, "head_query", text("HEAD /metrics?x=1 HTTP/1.0"));
  Write(dir, "no_version", text("GET /metrics"));
  Write(dir, "relative_target", text("GET metrics HTTP/1.1"));
}

// A 32-byte RPC header, then (for HelloAck) a method table.
void RpcSeeds(const fs::path& dir) {
  auto frame = [](const bx::rpc::FrameHeader& h, std::string_view table) {
    Bytes b(bx::rpc::kFrameHeaderBytes);
    bx::rpc::EncodeHeaderBytes(h, reinterpret_cast<std::byte*>(b.data()));
    b.insert(b.end(), table.begin(), table.end());
    return b;
  };
  using bx::rpc::FrameKind;
  Write(dir, "request",
        frame({FrameKind::kRequest, bx::rpc::kFlagIdempotent, 42, 3, 0, 20000}, ""));
  Write(dir, "response_error", frame({FrameKind::kResponse, 0, 42, 0, 4, 0}, ""));
  Write(dir, "hello_ack", frame({FrameKind::kHelloAck, 0, 1, 0, 0, 0}, "1 ps.Fetch\n2 ps.Push\n"));
  Write(dir, "bad_table", frame({FrameKind::kHelloAck, 0, 1, 0, 0, 0}, "x ps.Fetch\n2"));
  Write(dir, "short", Bytes(20, 0x42));
}

// Encodes a PS message with its encoder into exactly `size` bytes.
template <typename Value, typename Encode>
Bytes PsMessage(const Value& value, size_t size, Encode encode) {
  Bytes b(size);
  if (!encode(value, std::span<std::byte>(reinterpret_cast<std::byte*>(b.data()), size)).ok()) {
    std::fprintf(stderr, "make_seeds: a PS encoder refused its seed\n");
    std::exit(1);
  }
  return b;
}

void PsWireSeeds(const fs::path& dir) {
  namespace ps = bx::ps;
  ps::FetchRequest fetch{7, {1, 2, 0xffffffffffffffffull}};
  Write(dir, "fetch", PsMessage(fetch, ps::FetchRequestSize(3), ps::EncodeFetchRequest));
  ps::PushRequest push{{0x1234, 9}, 0xfeed, 7, 2, {5, 5}, {1.0f, -2.0f, 0.5f, 1e30f}};
  Bytes push_bytes = PsMessage(push, ps::PushRequestSize(2, 2), ps::EncodePushRequest);
  Write(dir, "push", push_bytes);
  Write(dir, "push_truncated", Bytes(push_bytes.begin(), push_bytes.end() - 3));
  Write(dir, "ack",
        PsMessage(ps::PushAck{{0x1234, 9}, true}, ps::PushAckSize(), ps::EncodePushAck));
  Write(dir, "ack_expired",
        PsMessage(ps::PushAck{.id = {0x1234, 9}, .session_expired = true, .min_generation = 77},
                  ps::PushAckSize(), ps::EncodePushAck));
  Write(dir, "forward",
        PsMessage(ps::ForwardedPush{3, 11, push}, ps::ForwardedPushSize(2, 2),
                  ps::EncodeForwardedPush));
  bx::Status error = bx::Unavailable("not primary");
  Write(dir, "error",
        PsMessage(error, ps::ErrorMessageSize(error),
                  [](const bx::Status& s, std::span<std::byte> out) {
                    return ps::EncodeErrorMessage(s, out);
                  }));
  Bytes response(ps::FetchResponseSize(2, 2));
  std::span<std::byte> out(reinterpret_cast<std::byte*>(response.data()), response.size());
  if (!ps::EncodeFetchResponseHeader(7, 2, 2, out).ok()) std::exit(1);
  Write(dir, "fetch_response", response);
  Bytes no_dim = response;  // dim 0 over 30 keys: refused (it once reached memcpy as null rows)
  Put32(no_dim, 12, 0);
  no_dim[16] = 30;
  Write(dir, "fetch_response_dim0", Bytes(no_dim.begin(), no_dim.begin() + 24));
}

// A snapshot body (what ps_snapshot_fuzz puts its header in front of): an embedding table with
// rows, a dense table, and a client's dedup state.
void PsSnapshotSeeds(const fs::path& dir) {
  namespace ps = bx::ps;
  ps::ShardState state;
  ps::TableConfig embedding{.id = 1, .name = "emb", .dim = 3};
  embedding.optimizer.kind = ps::OptimizerKind::kAdagrad;
  ps::TableConfig dense{
      .id = 2, .name = "dense", .kind = ps::TableKind::kDense, .dim = 2, .dense_rows = 4};
  if (!state.CreateTable(embedding).ok() || !state.CreateTable(dense).ok()) std::exit(1);
  ps::PushRequest push{{0x77, 1}, 0x5eed, 1, 3, {10, 11}, {1, 2, 3, 4, 5, 6}};
  if (!state.ApplyPush(push).ok()) std::exit(1);
  state.epoch = 2;
  state.applied_lsn = 1;
  auto encoded = state.Encode();
  if (!encoded.ok()) std::exit(1);
  const auto* body = reinterpret_cast<const uint8_t*>(encoded->data()) + 32;
  Write(dir, "two_tables", Bytes(body, body + encoded->size() - 32));
  ps::ShardState empty;
  auto nothing = empty.Encode();
  if (!nothing.ok()) std::exit(1);
  const auto* empty_body = reinterpret_cast<const uint8_t*>(nothing->data()) + 32;
  Write(dir, "empty", Bytes(empty_body, empty_body + nothing->size() - 32));
}

// Fabric streams (the cut-seed byte, the all-zero cookie, then frames from pid 4242,
// simnic_frame_fuzz.cc's peer): a request with a payload followed by a reply without one, a UD
// datagram, and a header announcing 2 GiB.
void SimnicFrameSeeds(const fs::path& dir) {
  auto frame = [](uint8_t kind, uint32_t payload_length) {
    bx::simnic::IpcHeader h{};
    h.magic = bx::simnic::kIpcMagic;
    h.kind = kind;
    h.src_pid = 4242;
    h.length = h.payload_length = payload_length;
    const auto* p = reinterpret_cast<const uint8_t*>(&h);
    Bytes out(p, p + sizeof(h));
    for (uint32_t i = 0; i < payload_length && i < 64; ++i) out.push_back(uint8_t(i));
    return out;
  };
  const Bytes cookie(bx::simnic::kIpcCookieBytes, 0);  // BX_SIM_FABRIC_COOKIE unset
  Bytes two{7};
  two.insert(two.end(), cookie.begin(), cookie.end());
  for (const Bytes& f : {frame(bx::simnic::kIpcRequest, 16), frame(bx::simnic::kIpcReply, 0)})
    two.insert(two.end(), f.begin(), f.end());
  Write(dir, "request_then_reply", two);
  Bytes datagram{5};
  datagram.insert(datagram.end(), cookie.begin(), cookie.end());
  Bytes one = frame(bx::simnic::kIpcDatagram, 32);
  datagram.insert(datagram.end(), one.begin(), one.end());
  Write(dir, "datagram", datagram);
  Bytes huge{3};
  huge.insert(huge.end(), cookie.begin(), cookie.end());
  Bytes announced = frame(bx::simnic::kIpcRequest, bx::simnic::kIpcMaxPayload);
  huge.insert(huge.end(), announced.begin(), announced.end());
  Write(dir, "announces_2gib", huge);
}

// fuzz_tcp_handshake: the server's secrets and the harness's proof mode (tcp_handshake_fuzz.cc),
// then the records a client sends, laid out as handshake.h states.
Bytes HandshakeRecordBytes(uint8_t type, uint16_t arg, uint8_t fill) {
  Bytes b(bx::tcp::kHandshakeRecordBytes, fill);
  Put32(b, 0, bx::tcp::kHandshakeMagic);
  b[4] = 1;  // version 1 records, as a version 1 client sends them (still spoken)
  b[5] = type;
  b[6] = uint8_t(arg);
  b[7] = uint8_t(arg >> 8);
  return b;
}

void HandshakeSeeds(const fs::path& dir) {
  constexpr uint8_t kHello = 1, kProof = 2;
  auto seed = [&](const std::string& name, uint8_t secrets, uint8_t proof_mode,
                  std::vector<Bytes> records) {
    Bytes b{secrets, proof_mode};
    for (const Bytes& r : records) b.insert(b.end(), r.begin(), r.end());
    Write(dir, name, b);
  };
  const Bytes plain_hello = HandshakeRecordBytes(kHello, 0, 0);
  const Bytes auth_hello = HandshakeRecordBytes(kHello, 1, 0x5a);
  const Bytes proof = HandshakeRecordBytes(kProof, 0, 0);
  seed("no_secret_plain_hello", 0, 0, {plain_hello});
  seed("no_secret_auth_hello", 0, 0, {auth_hello});
  seed("cluster_secret_proved", 1, 1, {auth_hello, proof});
  seed("privileged_secret_proved", 2, 2, {auth_hello, proof});
  seed("privileged_secret_unknown_to_server", 1, 2, {auth_hello, proof});
  seed("stranger_secret", 2, 3, {auth_hello, proof});
  seed("proof_as_given", 2, 0, {auth_hello, proof});
  seed("extra_record_after_proof", 1, 1, {auth_hello, proof, proof});
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <corpus dir>\n", argv[0]);
    return 2;
  }
  fs::path root = argv[1];
  BootstrapSeeds(root / "fuzz_bootstrap_hello");
  FrameSeeds(root / "fuzz_tcp_frame");
  HandshakeSeeds(root / "fuzz_tcp_handshake");
  EngineSeeds(root / "fuzz_engine_wire");
  HttpSeeds(root / "fuzz_http_request");
  RpcSeeds(root / "fuzz_rpc_frame");
  PsWireSeeds(root / "fuzz_ps_wire");
  PsSnapshotSeeds(root / "fuzz_ps_snapshot");
  SimnicFrameSeeds(root / "fuzz_simnic_frame");
  return 0;
}
