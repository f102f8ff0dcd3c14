// The footprint-over-time workload of paper Figure 5, on bemalloc: two threads grow a live set
// of mixed-size blocks (80% 16 B-16 KiB, 20% 64 KiB-1 MiB) during the first 30% of the run, then
// keep it constant while freeing and allocating as fast as they can. The registered footprint
// is sampled at intervals (each slot keeps its size, so the live set is constant after the ramp);
// from 40% of the run on is the plateau, during which there should be no registration at all.
#pragma once

namespace bx::alloc_bench {

// Arguments: [--seconds S] [--interval-ms M]. bemalloc must be initialised. Prints one JSON
// object: {"samples":[{t_ms, registered_bytes, regions, registrations, deregistrations,
// live_bytes}...], "plateau_start_ms", "registrations_during_plateau"}.
int FootprintMain(int argc, char** argv);

}  // namespace bx::alloc_bench
