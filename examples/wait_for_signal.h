// What the example servers share: serving until the operator stops them.
#pragma once

#include <pthread.h>

#include <csignal>

// Blocks the calling thread until SIGINT or SIGTERM arrives (the transport's I/O threads keep
// serving meanwhile). Call it from main(), before any other thread might take the signal.
inline void WaitForSigintOrSigterm() {
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  int signal = 0;
  sigwait(&signals, &signal);
}
