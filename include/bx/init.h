// Process set-up for a program that uses bexpress: one call before any transport, RPC client or
// server is created.
//
//   bx::Status s = bx::Init();   // rdma:// and tcp://, first RDMA device
//
//   bx::InitOptions options;     // a TCP-only program (no RDMA device needed)
//   options.rdma = false;
//   bx::Status s = bx::Init(options);
//
// Init registers the tcp:// and rdma:// transports (bx::CreateTransport) and creates bemalloc,
// the registered-memory pool every message Buffer comes from. With `rdma`, the pool registers
// its memory with the device, which stays open until the process exits; its keys are valid only
// on that device, so every rdma:// transport of the process runs on it.
//
// The library writes nothing to stderr by itself: its messages go to the sink set with
// bx::SetLogSink (bx/log.h), none by default.
//
// There is no shutdown: the pool and the device live until exit, since Buffers received by the
// application may be held on any thread until then (as libibverbs keeps its device list).
//
// Threads: Init may be called from any thread, and again: a later call with the same options
// (or default ones) returns OK, one asking for something else FailedPrecondition.
#pragma once

#include <string>
#include <string_view>

#include "bx/bemalloc.h"
#include "bx/export.h"
#include "bx/status.h"

namespace bx {

struct BX_EXPORT InitOptions {
  // Open an RDMA device and register bemalloc's memory with it, so that rdma:// works. false: a
  // TCP-only program; its memory is ordinary memory and creating an rdma:// transport fails.
  bool rdma = true;
  // The RDMA device, as `bx devices` names it; empty: the BX_DEVICE variable, else the first one.
  // BX_VERBS=sim|system|auto chooses between the software NIC (libbx_simnic.so) and libibverbs.
  std::string device;
  // The registered-memory pool (region size, how much empty memory stays registered, arenas).
  bemalloc::Options memory;
};

// Sets up the process as InitOptions describe. Unavailable, saying what was tried, when `rdma`
// is asked for and no RDMA device can be opened; the process is then left as it was, so a caller
// may retry with rdma = false.
BX_EXPORT Status Init(const InitOptions& options = {});

// True after a successful Init.
BX_EXPORT bool IsInitialized();

// The library's version, "major.minor.patch".
BX_EXPORT std::string_view Version();

}  // namespace bx
