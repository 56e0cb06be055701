#include "cluster/peers.hpp"

#include <atomic>
#include <caf/all.hpp>
#include <caf/io/all.hpp>
#include <condition_variable>
#include <deque>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>
#include <unordered_map>

#include "actors/scheduling.hpp"
#include "cluster/detail/job_pool.hpp"
#include "cluster/detail/overdue.hpp"
#include "cluster/detail/peer_router.hpp"
#include "cluster/detail/peer_wire.hpp"
#include "cluster/peer_calls.hpp"
#include "cluster/peer_messages.hpp"
#include "cluster/replication.hpp"
#include "cluster/shard_move.hpp"
#include "gateway/wire_format.hpp"

namespace durin::cluster {

namespace {

using wire::http_request;
using wire::http_response;

using detail::from_message;
using detail::split_address;
using detail::to_message;

using detail::job_pool;

// A forward until it is answered: retried after a not-owner.
struct pending_forward {
  std::uint32_t shard = 0;
  http_request request;
  gateway::principal caller;
  gateway::reply_fn reply;
  int attempts = 0;
};

}  // namespace

struct peers::impl {
  membership& members;
  gateway::api& routes;
  peer_options options;
  std::unique_ptr<caf::actor_system_config> config;
  std::unique_ptr<caf::actor_system> system;
  caf::actor router;
  caf::actor forwarder;
  caf::actor mover;  // detached: an export copies files
  replicator* replication = nullptr;
  std::uint16_t port = 0;
  std::unique_ptr<job_pool> jobs;

  std::mutex mutex;
  std::unordered_map<std::uint64_t, pending_forward> pending;
  std::uint64_t next_ticket = 0;
  bool stopped = false;
  std::size_t calls_in_flight = 0;  // call_nodes rounds running now
  std::condition_variable calls_done;

  std::atomic<std::uint64_t> forwarded{0}, served{0}, not_owner{0},
      timed_out{0}, unavailable{0};

  impl(membership& m, gateway::api& r, peer_options o)
      : members(m), routes(r), options(std::move(o)) {}

  gateway::offload_fn offload() {
    return [this](std::function<void()> job) { jobs->post(std::move(job)); };
  }

  // Takes the forward out of the table: its reply is called exactly once.
  std::optional<pending_forward> take(std::uint64_t ticket) {
    std::lock_guard lock(mutex);
    auto found = pending.find(ticket);
    if (found == pending.end()) {
      return std::nullopt;
    }
    auto out = std::move(found->second);
    pending.erase(found);
    return out;
  }

  void answer(std::uint64_t ticket, http_response response) {
    if (auto forward = take(ticket)) {
      forward->reply(std::move(response));
    }
  }
};

namespace {

// Where a request run here is answered: a call's response promise, or a
// forward's `forwarded` message to the forwarder that sent it (a forward
// is a message, not a request: cluster/detail/overdue.hpp).
struct reply_to {
  caf::response_promise promise;  // a call's
  caf::actor forwarder;           // a forward's, with its ticket
  std::uint64_t ticket = 0;

  template <class Self>
  void deliver(Self* self, forwarded_response response) {
    if (forwarder) {
      self->send(forwarder, forwarded_atom::value, ticket, std::move(response));
    } else {
      promise.deliver(std::move(response));
    }
  }
};

struct router_state {
  std::uint64_t next = 0;
  std::unordered_map<std::uint64_t, reply_to> waiting;
  static inline const char* name = "durin.peer-router";
};

// On the middleman's multiplexer thread (a broker), like CAF's own BASP
// broker: a write that arrives for a backup reaches its applier without
// waking a scheduler thread in between.
using router_actor = caf::io::stateful_broker<router_state>;

// Runs a request sent here through the api; `reply` gets its answer.
void answer_here(router_actor* self, peers::impl* owner, reply_to reply,
                 forwarded_request& request) {
  const auto id = ++self->state.next;
  self->state.waiting.emplace(id, std::move(reply));
  http_request http{std::move(request.method), std::move(request.target),
                    std::move(request.headers), std::move(request.body)};
  gateway::principal caller{std::move(request.tenant),
                            std::move(request.key_id),
                            static_cast<persistence::key_role>(request.role)};
  auto me = caf::actor_cast<caf::actor>(self);
  owner->routes.dispatch_forwarded(
      std::move(http), std::move(caller),
      [me, id](http_response response) {
        caf::anon_send(me, answered_atom::value, id, to_message(response));
      },
      owner->offload());
}

// A request another node forwarded: answered here when this node serves
// its shard at the epoch the sender saw or later, else not-owner.
void route_forward(router_actor* self, peers::impl* owner, std::uint64_t ticket,
                   forwarded_request& request) {
  reply_to reply{
      {}, caf::actor_cast<caf::actor>(self->current_sender()), ticket};
  if (!reply.forwarder) {
    return;  // nobody to answer
  }
  owner->served.fetch_add(1);
  const auto at = owner->members.locate(request.shard);
  if (at.at != route::where::here || at.epoch < request.epoch_seen) {
    reply.deliver(self, to_message(gateway::error_response(
                            gateway::not_owner_status, "not-owner",
                            "this node does not serve shard " +
                                std::to_string(request.shard))));
    return;
  }
  answer_here(self, owner, std::move(reply), request);
}

// Where a replicated write is in its shard's log.
struct write_place {
  std::uint32_t shard;
  std::uint64_t epoch;
  std::uint64_t written_at;
  std::uint64_t position;
};

// A primary's write goes to the shard's applier (its own thread, as each
// waits for an fsync); without one, the primary is told to send it again.
void route_write(router_actor* self, peers::impl* owner, write_place at,
                 std::string data, std::string node) {
  auto to =
      owner->replication ? owner->replication->applier(at.shard) : caf::actor{};
  if (!to) {
    if (auto primary = caf::actor_cast<caf::actor>(self->current_sender())) {
      self->send(primary, replicated_atom::value, at.shard, node, at.position,
                 static_cast<std::uint64_t>(replica_code::retry),
                 std::uint64_t{0});
    }
    return;
  }
  self->delegate(to, replicate_atom::value, at.shard, at.epoch, at.written_at,
                 at.position, std::move(data), std::move(node));
}

// The published actor: answers forwarded requests and calls through the
// api.
caf::behavior router(router_actor* self, peers::impl* owner) {
  return {
      [self, owner](forward_atom, std::uint64_t ticket,
                    forwarded_request& request) {
        route_forward(self, owner, ticket, request);
      },
      // A call is for this node, whatever shards it serves.
      [self, owner](call_atom, forwarded_request& request) {
        answer_here(self, owner, reply_to{self->make_response_promise()},
                    request);
      },
      // A shard's move: answered by the detached mover, so that copying
      // files never holds a forward up.
      [self, owner](move_files_atom atom, std::uint32_t shard,
                    std::uint64_t epoch) {
        return self->delegate(owner->mover, atom, shard, epoch);
      },
      [self, owner](move_chunk_atom atom, std::string& export_name,
                    std::string& name, std::uint64_t offset,
                    std::uint64_t length) {
        return self->delegate(owner->mover, atom, std::move(export_name),
                              std::move(name), offset, length);
      },
      [owner](replicas_atom) -> std::string {
        return owner->replication ? owner->replication->local_view().dump()
                                  : std::string("[]");
      },
      [self, owner](checkpoint_atom atom, std::uint32_t shard) {
        return self->delegate(owner->mover, atom, shard);
      },
      // Replication: writes go to the shard's applier (its own thread, as
      // each waits for an fsync), joins to the primary's actor. A write is
      // a message, not a request: the applier answers the primary with
      // replicated_atom.
      [self, owner](replicate_atom, std::uint32_t shard, std::uint64_t epoch,
                    std::uint64_t written_at, std::uint64_t position,
                    std::string& data, std::string& node) {
        route_write(self, owner, {shard, epoch, written_at, position},
                    std::move(data), std::move(node));
      },
      [self, owner](join_atom atom, std::uint32_t shard, std::string& node,
                    std::int64_t lease, std::uint64_t epoch,
                    std::uint64_t position) -> caf::delegated<caf::message> {
        auto to =
            owner->replication ? owner->replication->primary() : caf::actor{};
        if (!to) {
          self->make_response_promise().deliver(
              static_cast<std::uint64_t>(replica_code::not_primary),
              std::uint64_t{0});
          return {};
        }
        return self->delegate(to, atom, shard, std::move(node), lease, epoch,
                              position);
      },
      [self](answered_atom, std::uint64_t id, forwarded_response& response) {
        auto found = self->state.waiting.find(id);
        if (found != self->state.waiting.end()) {
          found->second.deliver(self, std::move(response));
          self->state.waiting.erase(found);
        }
      },
  };
}

caf::behavior mover(caf::event_based_actor*, shard_mover* moves) {
  auto refused = [](const error& problem) {
    return caf::make_error(caf::sec::runtime_error, problem.message);
  };
  return {
      [moves, refused](move_files_atom, std::uint32_t shard,
                       std::uint64_t epoch) -> caf::result<move_manifest> {
        if (moves == nullptr) {
          return caf::make_error(caf::sec::runtime_error, "no mover");
        }
        auto files = moves->manifest(shard, epoch);
        if (!files) {
          return refused(files.error());
        }
        return std::move(*files);
      },
      [moves, refused](checkpoint_atom,
                       std::uint32_t shard) -> caf::result<move_manifest> {
        if (moves == nullptr) {
          return caf::make_error(caf::sec::runtime_error, "no mover");
        }
        auto files = moves->checkpoint(shard);
        if (!files) {
          return refused(files.error());
        }
        return std::move(*files);
      },
      [moves, refused](move_chunk_atom, const std::string& export_name,
                       const std::string& name, std::uint64_t offset,
                       std::uint64_t length) -> caf::result<std::string> {
        if (moves == nullptr) {
          return caf::make_error(caf::sec::runtime_error, "no mover");
        }
        auto bytes = moves->chunk(export_name, name, offset, length);
        if (!bytes) {
          return refused(bytes.error());
        }
        return std::move(*bytes);
      },
  };
}

using clock_type = std::chrono::steady_clock;
using overdue_atom = caf::atom_constant<caf::atom("fwoverdue")>;

struct forwarder_state {
  std::map<std::string, caf::actor> handles;  // by peer endpoint
  std::map<std::string, std::vector<std::uint64_t>> waiting;
  // Forwards sent and not answered, by peer, with when each is overdue:
  // nothing answers them when the peer's connection goes, so the down
  // message does; nor when the peer is slow, so the overdue check does.
  std::map<std::string, std::map<std::uint64_t, clock_type::time_point>>
      in_flight;
  bool overdue_armed = false;  // an overdue check is on its way
  static inline const char* name = "durin.peer-forwarder";
};

// A broker too (see router_actor): a forward and its answer pass to and
// from the BASP broker without a scheduler thread's wake-up.
using forwarder_actor = caf::io::stateful_broker<forwarder_state>;

void send_forward(forwarder_actor* self, peers::impl* owner,
                  const caf::actor& handle, const std::string& peer,
                  std::uint64_t ticket);

void fail_waiting(forwarder_actor* self, peers::impl* owner,
                  const std::string& peer) {
  auto tickets = std::move(self->state.waiting[peer]);
  self->state.waiting.erase(peer);
  for (const auto ticket : tickets) {
    owner->answer(ticket, gateway::error_response(
                              503, "peer-unreachable",
                              "the node serving this shard cannot be reached "
                              "now; nothing was sent, retry later"));
  }
}

// Tries a connect this often before the requests waiting for it answer
// 503: a failure may be CAF's race of two nodes connecting to each other at
// once (one handshake of the pair is closed), and nothing was sent yet.
constexpr int connect_tries = 3;

void connect(forwarder_actor* self, peers::impl* owner, const std::string& peer,
             int tries = connect_tries) {
  std::string host;
  std::uint16_t port = 0;
  if (!split_address(peer, host, port)) {
    fail_waiting(self, owner, peer);
    return;
  }
  auto mm = self->system().middleman().actor_handle();
  self->request(mm, std::chrono::seconds(5), caf::connect_atom::value, host,
                port)
      .then(
          [self, owner, peer, tries](const caf::node_id&,
                                     caf::strong_actor_ptr& ptr,
                                     const std::set<std::string>&) {
            if (!ptr) {
              if (tries > 1) {
                connect(self, owner, peer, tries - 1);
              } else {
                fail_waiting(self, owner, peer);
              }
              return;
            }
            auto handle = caf::actor_cast<caf::actor>(ptr);
            self->monitor(handle);
            self->state.handles[peer] = handle;
            auto tickets = std::move(self->state.waiting[peer]);
            self->state.waiting.erase(peer);
            for (const auto ticket : tickets) {
              send_forward(self, owner, handle, peer, ticket);
            }
          },
          [self, owner, peer, tries](caf::error& failure) {
            // A timeout took the whole connect's wait: not tried again.
            if (tries > 1 && failure != caf::sec::request_timeout) {
              connect(self, owner, peer, tries - 1);
            } else {
              fail_waiting(self, owner, peer);
            }
          });
}

void send_forward(forwarder_actor* self, peers::impl* owner,
                  const caf::actor& handle, const std::string& peer,
                  std::uint64_t ticket) {
  forwarded_request message;
  {
    std::lock_guard lock(owner->mutex);
    auto found = owner->pending.find(ticket);
    if (found == owner->pending.end()) {
      return;
    }
    const auto& forward = found->second;
    message.shard = forward.shard;
    message.epoch_seen = owner->members.locate(forward.shard).epoch;
    message.method = forward.request.method;
    message.target = forward.request.target;
    message.headers = forward.request.headers;
    message.body = forward.request.body;
    message.tenant = forward.caller.tenant;
    message.key_id = forward.caller.key_id;
    message.role = static_cast<std::uint8_t>(forward.caller.role);
  }
  owner->forwarded.fetch_add(1);
  self->state.in_flight[peer].emplace(
      ticket, clock_type::now() + owner->options.forward_timeout);
  self->send(handle, forward_atom::value, ticket, std::move(message));
  detail::arm_overdue_check(self, self->state.overdue_armed,
                            owner->options.forward_timeout,
                            overdue_atom::value);
}

// The answer of a forward the peer served.
void on_forwarded(forwarder_actor* self, peers::impl* owner,
                  std::uint64_t ticket, forwarded_response& response) {
  if (response.status != gateway::not_owner_status) {
    owner->answer(ticket, from_message(std::move(response)));
    return;
  }
  owner->not_owner.fetch_add(1);
  bool again = false;
  std::uint32_t shard = 0;
  {
    std::lock_guard lock(owner->mutex);
    auto found = owner->pending.find(ticket);
    if (found != owner->pending.end()) {
      again = ++found->second.attempts <= 2;
      shard = found->second.shard;
    }
  }
  if (again) {
    self->delayed_send(self, owner->options.not_owner_pause, go_atom::value,
                       ticket);
    return;
  }
  owner->unavailable.fetch_add(1);
  owner->answer(ticket,
                gateway::shard_unavailable(shard, owner->members.ttl_s()));
}

// Answers the forwards overdue; true while any is still in flight.
bool fail_overdue(forwarder_actor* self, peers::impl* owner) {
  const auto now = clock_type::now();
  bool waiting = false;
  for (auto& [peer, tickets] : self->state.in_flight) {
    for (auto it = tickets.begin(); it != tickets.end();) {
      if (it->second > now) {
        ++it;
        continue;
      }
      owner->timed_out.fetch_add(1);
      owner->answer(
          it->first,
          gateway::error_response(
              503, "forward-outcome-unknown",
              "the node serving this shard did not answer in time; the "
              "request may or may not have taken effect: retry it with the "
              "same Idempotency-Key"));
      it = tickets.erase(it);
    }
    waiting = waiting || !tickets.empty();
  }
  return waiting;
}

// Forwards sent to a node whose connection is gone may or may not have
// been carried out, and no answer will come: each is answered so.
void on_peer_gone(forwarder_actor* self, peers::impl* owner,
                  const caf::actor_addr& source) {
  for (auto it = self->state.handles.begin();
       it != self->state.handles.end();) {
    if (it->second.address() != source) {
      ++it;
      continue;
    }
    auto lost = std::move(self->state.in_flight[it->first]);
    self->state.in_flight.erase(it->first);
    for (const auto& [ticket, due] : lost) {
      owner->answer(
          ticket,
          gateway::error_response(
              503, "forward-outcome-unknown",
              "the node serving this shard went away before it answered; "
              "the request may or may not have taken effect: retry it "
              "with the same Idempotency-Key"));
    }
    it = self->state.handles.erase(it);
  }
}

// Sends the pending forward `ticket` to the node serving its shard now:
// answered unavailable when none does, handed to this node's api when the
// shard came here meanwhile, queued while its node's connection is made.
void go_forward(forwarder_actor* self, peers::impl* owner,
                std::uint64_t ticket) {
  std::uint32_t shard = 0;
  {
    std::lock_guard lock(owner->mutex);
    auto found = owner->pending.find(ticket);
    if (found == owner->pending.end()) {
      return;
    }
    shard = found->second.shard;
  }
  const auto at = owner->members.locate(shard);
  if (at.at == route::where::nowhere) {
    owner->unavailable.fetch_add(1);
    owner->answer(ticket,
                  gateway::shard_unavailable(shard, owner->members.ttl_s()));
    return;
  }
  if (at.at == route::where::here) {
    // The shard came here meanwhile: answered as a forward would be.
    if (auto forward = owner->take(ticket)) {
      owner->routes.dispatch_forwarded(
          std::move(forward->request), std::move(forward->caller),
          std::move(forward->reply), owner->offload());
    }
    return;
  }
  auto known = self->state.handles.find(at.peer);
  if (known != self->state.handles.end()) {
    send_forward(self, owner, known->second, at.peer, ticket);
    return;
  }
  auto& queue = self->state.waiting[at.peer];
  queue.push_back(ticket);
  if (queue.size() == 1) {
    connect(self, owner, at.peer);
  }
}

caf::behavior forwarder(forwarder_actor* self, peers::impl* owner) {
  self->set_down_handler([self, owner](caf::down_msg& down) {
    on_peer_gone(self, owner, down.source);
  });
  return {
      [self, owner](forwarded_atom, std::uint64_t ticket,
                    forwarded_response& response) {
        for (auto& [peer, tickets] : self->state.in_flight) {
          if (tickets.erase(ticket) != 0) {
            on_forwarded(self, owner, ticket, response);
            return;
          }
        }
        // Answered already: overdue, or its peer's connection went.
      },
      [self, owner](overdue_atom atom) {
        detail::run_overdue_check(self, self->state.overdue_armed,
                                  owner->options.forward_timeout, atom,
                                  [&] { return fail_overdue(self, owner); });
      },
      [self, owner](go_atom, std::uint64_t ticket) {
        go_forward(self, owner, ticket);
      },
  };
}

}  // namespace

peers::peers(membership& members, gateway::api& routes, peer_options options)
    : impl_(std::make_unique<impl>(members, routes, std::move(options))) {
  auto& self = *impl_;
  self.jobs = std::make_unique<job_pool>(self.options.workers);
  self.config = std::make_unique<caf::actor_system_config>();
  self.config->load<caf::io::middleman>();
  self.config->add_message_types<caf::id_block::durin_cluster>();
  self.config->set("scheduler.max-threads", std::size_t{2});
  self.config->set("middleman.workers", std::size_t{0});
  actors::block_idle_workers(*self.config);
  self.config->set("middleman.heartbeat-interval",
                   caf::timespan{std::chrono::milliseconds(500)});
  self.config->set("middleman.connection-timeout",
                   caf::timespan{std::chrono::seconds(3)});
  self.config->set(
      "middleman.app-identifiers",
      std::vector<std::string>{"durin-" + members.options().cluster});
  self.system = std::make_unique<caf::actor_system>(*self.config);
  self.router = self.system->middleman().spawn_broker(router, impl_.get());
  self.forwarder =
      self.system->middleman().spawn_broker(forwarder, impl_.get());
}

peers::~peers() {
  stop();
}

void peers::set_replicator(replicator* replication) {
  impl_->replication = replication;
}

void peers::set_mover(shard_mover* moves) {
  impl_->mover = impl_->system->spawn<caf::detached>(mover, moves);
}

caf::actor_system& peers::system() {
  return *impl_->system;
}

result<std::string> peers::listen() {
  auto& self = *impl_;
  std::string host;
  std::uint16_t port = 0;
  if (!split_address(self.options.listen, host, port)) {
    return make_error(
        errc::invalid_argument,
        "--peer-listen must be HOST:PORT; got '" + self.options.listen + "'");
  }
  std::string advertised_host;
  std::uint16_t advertised_port = 0;
  if (!self.options.advertise.empty() &&
      (!split_address(self.options.advertise, advertised_host,
                      advertised_port) ||
       advertised_port == 0)) {
    return make_error(errc::invalid_argument,
                      "--peer-advertise must be HOST:PORT with a port other "
                      "than 0; got '" +
                          self.options.advertise + "'");
  }
  auto bound =
      self.system->middleman().publish(self.router, port, host.c_str(), true);
  if (!bound) {
    return make_error(errc::invalid_argument,
                      "cannot listen for peers on " + self.options.listen +
                          ": " + self.system->render(bound.error()));
  }
  self.port = *bound;
  if (!self.options.advertise.empty()) {
    return self.options.advertise;
  }
  return host + ":" + std::to_string(*bound);
}

void peers::stop() {
  auto& self = *impl_;
  {
    std::lock_guard lock(self.mutex);
    if (self.stopped) {
      return;
    }
    self.stopped = true;
  }
  {
    // Calls in flight end by their deadline; none starts from here on.
    std::unique_lock lock(self.mutex);
    self.calls_done.wait(lock, [&self] { return self.calls_in_flight == 0; });
  }
  if (self.port != 0) {
    (void)self.system->middleman().unpublish(self.router, self.port);
  }
  caf::anon_send_exit(self.router, caf::exit_reason::user_shutdown);
  caf::anon_send_exit(self.forwarder, caf::exit_reason::user_shutdown);
  if (self.mover) {
    caf::anon_send_exit(self.mover, caf::exit_reason::user_shutdown);
  }
  // Handles dropped first: a detached actor's thread ends only once its
  // actor is destroyed, and the system's destructor waits for that thread.
  self.router = caf::actor{};
  self.forwarder = caf::actor{};
  self.mover = caf::actor{};
  self.system.reset();  // waits for its actors
  std::unordered_map<std::uint64_t, pending_forward> left;
  {
    std::lock_guard lock(self.mutex);
    left.swap(self.pending);
  }
  for (auto& [ticket, forward] : left) {
    forward.reply(gateway::error_response(
        503, "shutting-down", "the node is stopping; retry on another node"));
  }
  self.jobs.reset();
}

gateway::placement::where peers::locate(std::uint32_t shard) const {
  switch (impl_->members.locate(shard).at) {
    case route::where::here:
      return where::here;
    case route::where::there:
      return where::there;
    case route::where::nowhere:
      break;
  }
  return where::nowhere;
}

bool peers::local_shard(std::uint32_t& shard) const {
  return impl_->members.local_shard(shard);
}

bool peers::any_shard(std::uint32_t& shard) const {
  return impl_->members.any_shard(shard);
}

void peers::forward(std::uint32_t shard, wire::http_request request,
                    const gateway::principal& caller, gateway::reply_fn reply) {
  auto& self = *impl_;
  std::uint64_t ticket = 0;
  {
    std::lock_guard lock(self.mutex);
    if (self.stopped) {
      reply(gateway::error_response(503, "shutting-down",
                                    "the node is stopping; retry on another "
                                    "node"));
      return;
    }
    ticket = ++self.next_ticket;
    self.pending.emplace(ticket, pending_forward{shard, std::move(request),
                                                 caller, std::move(reply), 0});
  }
  caf::anon_send(self.forwarder, go_atom::value, ticket);
}

std::vector<wire::http_response> peers::ask_every_other_node(
    const wire::http_request& request, const gateway::principal& caller) {
  std::vector<std::future<http_response>> answers;
  for (const auto shard : impl_->members.one_shard_per_other_node()) {
    auto promise = std::make_shared<std::promise<http_response>>();
    answers.push_back(promise->get_future());
    forward(shard, request, caller, [promise](http_response response) {
      promise->set_value(std::move(response));
    });
  }
  std::vector<http_response> out;
  for (auto& answer : answers) {
    out.push_back(answer.get());  // every forward answers, by its deadline
  }
  return out;
}

std::vector<gateway::placement::node_answer> peers::ask_every_live_node(
    const wire::http_request& request, const gateway::principal& caller,
    std::chrono::milliseconds timeout) {
  auto& self = *impl_;
  std::vector<call_target> targets;
  for (const auto& node : self.members.live_nodes()) {
    if (node.id != self.members.options().node_id) {
      targets.push_back({node.id, node.peer});
    }
  }
  {
    std::lock_guard lock(self.mutex);
    if (!self.stopped) {
      ++self.calls_in_flight;
    } else {
      std::vector<node_answer> out;
      for (const auto& target : targets) {
        out.push_back({target.node, gateway::error_response(
                                        503, "shutting-down",
                                        "the node is stopping; nothing was "
                                        "sent to node " +
                                            target.node)});
      }
      return out;
    }
  }
  forwarded_request message;
  message.method = request.method;
  message.target = request.target;
  message.headers = request.headers;
  message.body = request.body;
  message.tenant = caller.tenant;
  message.key_id = caller.key_id;
  message.role = static_cast<std::uint8_t>(caller.role);
  auto answers = call_nodes(*self.system, targets, message, timeout);
  {
    std::lock_guard lock(self.mutex);
    --self.calls_in_flight;
  }
  self.calls_done.notify_all();
  return answers;
}

std::int64_t peers::registration() const {
  return impl_->members.lease_id();
}

std::vector<gateway::placement::node_ref> peers::live_nodes() const {
  std::vector<node_ref> out;
  for (const auto& node : impl_->members.live_nodes()) {
    out.push_back({node.id, node.lease});
  }
  return out;
}

std::vector<gateway::placement::node_shard> peers::other_nodes() const {
  std::vector<node_shard> out;
  for (const auto shard : impl_->members.one_shard_per_other_node()) {
    auto at = impl_->members.locate(shard);
    if (at.at == route::where::there) {
      out.push_back(node_shard{std::move(at.node), shard});
    }
  }
  return out;
}

std::string peers::node_id() const {
  return impl_->members.options().node_id;
}

bool peers::live() const {
  return impl_->members.lease_left_ms() > 0;
}

std::vector<std::uint32_t> peers::unserved() const {
  return impl_->members.unserved();
}

std::vector<std::uint32_t> peers::awaited() const {
  return impl_->members.awaited();
}

std::vector<std::uint32_t> peers::copies_lost() const {
  return impl_->members.copies_lost();
}

std::string peers::metrics_text() const {
  const auto counts = statistics();
  const auto& members = impl_->members;
  std::string text =
      "# HELP durin_cluster_shards_served Shards this node holds the lease "
      "of.\n"
      "# TYPE durin_cluster_shards_served gauge\n"
      "durin_cluster_shards_served " +
      std::to_string(members.shards_served()) +
      "\n"
      "# HELP durin_cluster_shards_unavailable Shards no node serves now.\n"
      "# TYPE durin_cluster_shards_unavailable gauge\n"
      "durin_cluster_shards_unavailable " +
      std::to_string(members.unserved().size()) +
      "\n"
      "# HELP durin_cluster_shard_copies_lost Shards this node owns and "
      "does not take: its copy lost their history.\n"
      "# TYPE durin_cluster_shard_copies_lost gauge\n"
      "durin_cluster_shard_copies_lost " +
      std::to_string(members.copies_lost().size()) +
      "\n"
      "# HELP durin_cluster_lease_left_ms Until this node's lease deadline.\n"
      "# TYPE durin_cluster_lease_left_ms gauge\n"
      "durin_cluster_lease_left_ms " +
      std::to_string(members.lease_left_ms()) + "\n";
  const std::pair<const char*, std::uint64_t> totals[] = {
      {"durin_cluster_forwarded_total", counts.forwarded},
      {"durin_cluster_forwards_served_total", counts.served},
      {"durin_cluster_not_owner_total", counts.not_owner},
      {"durin_cluster_forward_timeouts_total", counts.timed_out},
      {"durin_cluster_shard_unavailable_total", counts.unavailable}};
  for (const auto& [name, value] : totals) {
    text += "# TYPE " + std::string(name) + " counter\n" + name + " " +
            std::to_string(value) + "\n";
  }
  if (impl_->replication) {
    const auto copies = impl_->replication->statistics();
    const std::pair<const char*, std::uint64_t> replicated[] = {
        {"durin_replication_writes_shipped_total", copies.shipped},
        {"durin_replication_writes_applied_total", copies.applied},
        {"durin_replication_backup_syncs_total", copies.synced},
        {"durin_replication_backup_answers_total", copies.answered},
        {"durin_replication_backups_dropped_total", copies.dropped},
        {"durin_replication_backups_added_total", copies.added},
        {"durin_replication_recopies_total", copies.recopies}};
    for (const auto& [name, value] : replicated) {
      text += "# TYPE " + std::string(name) + " counter\n" + name + " " +
              std::to_string(value) + "\n";
    }
    impl_->replication->render_latencies(text);
  }
  return text;
}

wire::http_response peers::describe() {
  auto status = impl_->members.describe();
  if (!status) {
    return gateway::error_response(status.error());
  }
  auto& view = *status;
  view["self"] = impl_->members.options().node_id;
  view["selfLeaseLeftMs"] = impl_->members.lease_left_ms();
  view["selfShardsServed"] = impl_->members.shards_served();
  view["selfCopiesLost"] = impl_->members.copies_lost();
  if (impl_->replication) {
    add_replicas(view);
  }
  return gateway::json_response(200, view);
}

void peers::add_replicas(nlohmann::json& view) {
  // Every live node's copies, asked at once; a node that does not answer
  // in time is left out (its copies show no position).
  using json = nlohmann::json;
  std::map<std::uint32_t, json> copies;  // by shard
  auto gather = [&copies](const std::string& node, const json& local) {
    for (const auto& copy : local) {
      json one = copy;
      one["node"] = node;
      copies[copy.value("shard", 0u)].push_back(std::move(one));
    }
  };
  gather(impl_->members.options().node_id, impl_->replication->local_view());
  caf::scoped_actor self{*impl_->system};
  for (const auto& node : impl_->members.live_nodes()) {
    if (node.id == impl_->members.options().node_id) {
      continue;
    }
    auto router = detail::peer_router(*impl_->system, node.peer);
    if (!router) {
      continue;
    }
    self->request(*router, std::chrono::seconds(2), replicas_atom::value)
        .receive(
            [&](const std::string& text) {
              auto local = json::parse(text, nullptr, false);
              if (local.is_array()) {
                gather(node.id, local);
              }
            },
            [](caf::error&) {});
  }
  for (auto& shard : view["shards"]) {
    auto& found = copies[shard.value("id", 0u)];
    std::uint64_t primary = 0;
    for (const auto& copy : found) {
      if (copy.value("role", "") == "primary") {
        primary = copy.value("position", std::uint64_t{0});
      }
    }
    json replicas = json::array();
    for (const auto& copy : found) {
      const auto position = copy.value("position", std::uint64_t{0});
      replicas.push_back(
          {{"node", copy["node"]},
           {"role", copy["role"]},
           {"epoch", copy["epoch"]},
           {"position", position},
           {"lagWrites", primary > position ? primary - position : 0}});
    }
    shard["replicas"] = std::move(replicas);
  }
}

std::int64_t peers::retry_after_s() const {
  return impl_->members.ttl_s();
}

peers::counters peers::statistics() const {
  return {impl_->forwarded.load(), impl_->served.load(),
          impl_->not_owner.load(), impl_->timed_out.load(),
          impl_->unavailable.load()};
}

}  // namespace durin::cluster
