// "Retry a start safely" (README.md, Clients): the same start twice with
// one idempotency key is one run; the same key with another body is refused.
// Reads DURIN_SERVER and DURIN_API_KEY. Prints:
//   true completed
//   conflict Idempotency-Key was reused with a different request body. ...
import { Durin, DurinApiError } from "@durin/client";

const durin = new Durin({ retry: { attempts: 3 } }); // DURIN_SERVER, DURIN_API_KEY

const start = () =>
  durin.runs.start({
    flow: "acme.review-order",
    input: { orderId: "A-200" },
    idempotencyKey: "review-A-200",
  });

const first = await start();
const retry = await start(); // the same start again, after the first answered
console.log(first.id === retry.id, retry.status);

try {
  await durin.runs.start({
    flow: "acme.review-order",
    input: { orderId: "A-100" }, // a different request, same key
    idempotencyKey: "review-A-200",
  });
} catch (err) {
  if (DurinApiError.is(err)) console.log(err.error.code, err.message);
}
