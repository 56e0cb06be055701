// Embedding durin in a CAF application: the application owns the actor
// system and its own actors; durin runs on the same system, whose config
// registers durin's message types. An `order_desk` actor starts a flow
// without blocking and receives the run's end as an ordinary actor message.
//
// Usage: embed_example DATA_DIR   (exits 0 when the flow completed)
#include <caf/all.hpp>
#include <durin/caf.hpp>
#include <durin/durin.hpp>
#include <durin/worker.hpp>
#include <iostream>

namespace {

using place_order_atom = caf::atom_constant<caf::atom("placeorder")>;
using admitted_atom = caf::atom_constant<caf::atom("admitted")>;

durin::flow<durin::json> ship_order(durin::context& ctx, durin::json input) {
  auto order = input.at("orderId").get<std::string>();
  // A named lambda: g++ 12 destroys a lambda temporary with a non-trivial
  // capture twice when it is written inside the co_await expression.
  auto print_label = [order] {
    return "label for " + order + " (" + durin::step_metadata().step_id + ")";
  };
  auto label = co_await ctx.step("print-label", print_label);
  co_await ctx.sleep(std::chrono::milliseconds(50));
  co_return durin::json{{"orderId", order}, {"label", label}};
}

// Starts orders and reports each one's end to `reporter`.
caf::behavior order_desk(caf::event_based_actor* self, durin::runtime* rt,
                         caf::actor reporter) {
  return {
      [=](place_order_atom, const std::string& order_id) {
        auto me = caf::actor_cast<caf::actor>(self);
        // start_async never blocks this actor; its callback runs elsewhere,
        // so it only sends a message back.
        rt->start_async("shop.ship-order", {{"orderId", order_id}}, {},
                        [me](durin::result<durin::run_info> admitted) {
                          if (admitted) {
                            caf::anon_send(me, admitted_atom::value,
                                           admitted->id);
                          } else {
                            std::cerr << admitted.error().to_string() << "\n";
                          }
                        });
      },
      [=](admitted_atom, const std::string& run_id) {
        rt->notify_on_finish(run_id, reporter);
      },
  };
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: embed_example DATA_DIR\n";
    return 2;
  }
  caf::actor_system_config config;
  // durin's message types, registered before the system is built: without
  // them runtime::open refuses the system (durin/caf.hpp).
  durin::add_message_types(config);
  caf::actor_system system{config};

  durin::registry flows;
  flows.flow("shop.ship-order", ship_order);
  auto rt = durin::runtime::open({.data_dir = argv[1]}, flows, system);
  if (!rt) {
    std::cerr << rt.error().to_string() << "\n";
    return 1;
  }

  caf::scoped_actor reporter{system};
  auto desk = system.spawn(order_desk, rt->get(),
                           caf::actor_cast<caf::actor>(reporter));
  caf::anon_send(desk, place_order_atom::value, std::string("B-7"));

  int exit_code = 1;
  reporter->receive(
      [&](durin::run_finished_atom, const durin::run_info& info) {
        std::cout << info.to_json().dump(2) << "\n";
        exit_code = info.status == durin::run_status::completed ? 0 : 1;
      },
      caf::after(std::chrono::seconds(30)) >>
          [&] { std::cerr << "no answer from durin within 30 s\n"; });
  caf::anon_send_exit(desk, caf::exit_reason::user_shutdown);
  rt->reset();  // closes durin before the actor system it runs on

  // The remote worker of the same package (durin::durin_client): a process
  // that runs steps for a `durin serve` node would call run(); here it is
  // only made, to show that it links from the installed package.
  durin::worker idle_worker({.task_queue = "shipping"}, durin::registry{});
  if (idle_worker.stats().tasks != 0) {
    return 1;
  }
  return exit_code;
}
