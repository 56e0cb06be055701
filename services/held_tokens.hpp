// Which tokens are held, as their token actors last saw them durably: a
// shared read path that lets a duplicate start be refused without a hop to
// the token's actor.
//
// Contract: only a token actor writes its own entry. It erases the entry
// before it submits any write that may change the owner, and sets it again
// once that write is durable, so an entry never names an owner the store
// does not (or did not, a moment ago) hold; a start that finds no entry goes
// to the actor, which decides. Entries exist only while the token's actor
// lives (it erases its entry as it passivates), so memory follows live
// actors, not tokens.
//
// A run that ends marks its tokens as ending before it submits the write
// that records its end, so before anyone can read that end; the token actor
// clears the mark when it handles the end. A start that follows an observed
// end is thus never refused from here by the ended owner: it goes to the
// actor, which checks the owner's record when the owner is marked.
//
// An owner may release its token in the very write that records its end,
// saving the token actor a write of its own. The token actor offers that
// only while it is idle and the release is a plain delete (no payload ever
// received, no webhook, no retention left); the owner takes the offer as it
// submits that write, and settles it once the write is durable or failed.
// From the take until the token actor has seen the settlement, the token
// actor serves no request and does not passivate (begin_request,
// erase_unless_releasing), and the entry refuses nothing, so no write of
// the token actor can be ordered against the owner's delete.
//
// Thread-safety: every member may be called from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <limits>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>

namespace durin::services {

class held_tokens {
 public:
  static constexpr std::int64_t while_active =
      std::numeric_limits<std::int64_t>::max();

  // `address` (keys::token) is held by `owner_run` until `until_ms`
  // (while_active for an active owner).
  // Neither touches an entry whose release the token actor has not seen.
  void set(const std::string& address, const std::string& owner_run,
           std::int64_t until_ms);
  void erase(const std::string& address);
  // `owner_run` has ended: while marked, its active entry refuses nothing.
  void mark_ending(const std::string& address, const std::string& owner_run);
  void clear_ending(const std::string& address, const std::string& owner_run);
  bool is_ending(const std::string& address,
                 const std::string& owner_run) const;
  // The owner holding `address` at `now_ms`, if known to hold it.
  std::optional<std::string> holder(const std::string& address,
                                    std::int64_t now_ms) const;

  enum class release_state { none, in_flight, done, unknown };

  // Token actor, idle: its active owner may delete the token at its end.
  void offer_release(const std::string& address, const std::string& owner_run);
  // Owner, submitting the write that records its end: true when it took the
  // offer (that write must then delete the token).
  bool take_release(const std::string& address, const std::string& owner_run);
  // Token actor, idle, for an owner that continues as new: as an offer the
  // owner took at once, so the owner's end write may rewrite the token
  // (naming its successor). The owner settles it as not `ok`, so the
  // actor reads the token again. False when the entry is not the owner's.
  bool hold_for_hand_over(const std::string& address,
                          const std::string& owner_run);
  // Owner, once that write is durable (`ok`) or failed (indefinite): true
  // when the token actor waits for the settlement and must be woken.
  bool settle_release(const std::string& address, bool ok);
  // Token actor, before serving each request: withdraws any offer and tells
  // how an owner's release stands. `in_flight`: serve nothing until woken;
  // `done`: the token is deleted; `unknown`: read it again. After done and
  // unknown the entry is gone.
  release_state begin_request(const std::string& address);
  // Token actor, passivating: erases its entry unless a release is in
  // flight (then it must stay to be woken).
  bool erase_unless_releasing(const std::string& address);

 private:
  struct entry {
    std::string owner_run;
    std::int64_t until_ms = 0;
    bool offered = false;
    release_state release = release_state::none;
    bool actor_waiting = false;
  };
  struct shard {
    mutable std::mutex mutex;
    std::unordered_map<std::string, entry> entries;
    std::unordered_map<std::string, std::string> ending;  // address -> run
  };
  shard& shard_of(const std::string& address) const;

  mutable std::array<shard, 16> shards_;
};

}  // namespace durin::services
