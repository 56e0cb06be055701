// Runs of shards another node serves, as this node's runs reach them: a
// child started in another node's shard, a run handle (ctx.run) on a run
// there, a child closed with its parent, a child asking after its parent;
// and the hook protocol between a run and a token whose shards two nodes
// serve (hook_mail).
// The runtime stays node-agnostic: in a cluster the gateway implements this
// port over its forwards (gateway/remote_runs.cpp), as if a client had sent
// the request to the run's node; outside a cluster there is none, and every
// shard is served here.
//
// Every answer may come late or not at all for certain (an owner lost or
// paused): a call whose outcome is not known answers an error that says so
// (start-outcome-unknown, shard-unavailable, timeout), and the run that
// asked tries again after a backoff. A start carries the run id its parent
// recorded (and its command id, the child's start token), so a second try
// admits nothing twice.
//
// Thread-safety: every method may be called from any thread; none blocks;
// `done` runs once, on any thread, and must not block.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "actors/messages.hpp"
#include "durin/run.hpp"

namespace durin::services {

struct start_request;

// One message of the hook protocol (actors/token_actor.hpp) for an actor of
// a shard another node serves: a run's to a token (claim, subscribe,
// dispose, owner end), or a token's to a run (claimed, payload, lost).
// services/hook_mail.hpp makes and delivers them.
struct hook_mail {
  enum class kind : std::uint8_t {
    claim,
    subscribe,
    dispose,
    owner_end,
    claimed,
    payload,
    lost,
  };
  kind what = kind::claim;
  std::string tenant;
  std::string to;     // the token (the first four kinds), else the run id
  std::string bytes;  // the message, in CAF's binary form

  bool to_token() const { return what <= kind::owner_end; }
};

class remote_runs {
 public:
  virtual ~remote_runs() = default;

  using run_done = std::function<void(result<run_info>)>;

  // Whether another node serves `shard` now, or none does: its runs are
  // reached through this port, not the local store.
  virtual bool elsewhere(std::uint32_t shard) const = 0;

  // Admits a child run (request.run_id set, parent_run_id and parent_close
  // with it) in its shard's node: the run, once its admission is durable
  // there, or why not.
  virtual void start(const start_request& request, run_done done) = 0;

  // The run's state: at once (`until_end` false), or once it ended (else
  // after a long poll's wait, when the answer is the run still going);
  // run-not-found when there is none in `tenant`.
  virtual void read(const std::string& tenant, const std::string& run_id,
                    bool until_end, run_done done) = 0;

  // Cancels or terminates the run (a child closed with its parent).
  virtual void cancel(const std::string& tenant, const std::string& run_id,
                      const actors::cancel_request& request, run_done done) = 0;

  // Puts `mail` in its actor's mailbox on the node serving the actor's
  // shard. Never dropped while this node runs: one destination's mail goes
  // in the order posted, one at a time, each tried again until a node took
  // it (this one, once the shard is served here). Lost with this node, as a
  // local mailbox is: the protocol asks again (a run waiting on a token of
  // another node claims and subscribes again every few seconds).
  virtual void post(hook_mail mail) = 0;
};

// What a read's answer says of a run another node serves: it ended, or
// there is none (a run not found is never started later under that id).
// Out of line: g++ 12 sees an uninitialised error through the inlined
// variant of some callers' lambdas (-Wmaybe-uninitialized, a false alarm).
bool has_ended(const result<run_info>& read);

}  // namespace durin::services
