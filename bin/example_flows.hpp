// The example flows every durin node registers: they show new users the
// model, and end-to-end tests rely on their exact behaviour.
//
// | flow               | input          | output                          |
// | acme.review-order  | {"orderId"}    | {"orderId","decision","score"}  |
// | acme.sleep         | {"ms"}         | {"sleptMs"}                     |
// | acme.flaky         | {"failures"}   | {"attempts","stepId"}           |
// | acme.order-notes   | {"orderId","note"} | {"orderId","notes"}         |
// | acme.await-webhook | {}             | {"method","headers","body"}     |
// | acme.inbox         | {} (messages "note") | {"notes"}                 |
// | acme.counter       | {"value"?} (update "add" {"by"}, query "value", |
// |                    |   message "stop")    | {"value"}                 |
// | acme.parent        | {"orders"}     | {"results"}: each child's output |
// | acme.rolling       | {"limit","every"} | {"count","runs"}             |
// | acme.tagged        | {"memo"?,"searchAttributes"?} (messages "tag" of |
// |                    |   the same, until one has "done") | {"tags"}   |
#pragma once

#include "durin/registry.hpp"

namespace durin::examples {

// Adds the example flows and their steps to `flows`.
void register_examples(registry& flows);

}  // namespace durin::examples
