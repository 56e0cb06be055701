"""'Retry a start safely' (README.md, Clients): the same start twice with one
idempotency key is one run; the same key with another body is refused.
Reads DURIN_SERVER and DURIN_API_KEY. Prints:
    True completed
    Idempotency-Key was reused with a different request body. ...
"""
from durin import ConflictError, Durin

durin = Durin(retry={"attempts": 3})  # DURIN_SERVER, DURIN_API_KEY


def start():
    return durin.runs.start(
        flow="acme.review-order", input={"orderId": "A-200"}, idempotency_key="review-A-200"
    )


first = start()
retry = start()  # the same start again, after the first answered
print(first.id == retry.id, retry.status)

try:
    durin.runs.start(
        flow="acme.review-order",
        input={"orderId": "A-100"},  # a different request, same key
        idempotency_key="review-A-200",
    )
except ConflictError as err:
    print(err)
