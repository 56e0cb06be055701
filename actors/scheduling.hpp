// How durin's actor systems schedule: every caf::actor_system the process
// makes (the node's, and the peers' with the middleman) gets the same
// worker polling, so no worker of either spins on a small machine.
#pragma once

namespace caf {
class actor_system_config;
}  // namespace caf

namespace durin::actors {

// CAF's work-stealing workers poll their queue before blocking: 100 busy
// attempts, then 500 more with a 50 µs sleep each. A node's actors mostly
// wait for fsyncs and the network, so on a small machine those sleeps are
// a stream of context switches that take CPU from the committer and the
// load itself (a fifth of `durin serve`'s samples in a profile of keyed
// starts; a tenth of a replicating node's in the peers' system). After a
// short spin a worker blocks on its condition variable, which every
// enqueue from outside signals.
void block_idle_workers(caf::actor_system_config& config);

}  // namespace durin::actors
