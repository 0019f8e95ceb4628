"""Example activities: an order pipeline (validate, reserve stock, quote shipping, charge, confirm, audit).

Importing this module registers its activities on the default `Activity` registry (what `agentq worker -m
workers.orders` relies on); `register_activities(registry)` registers them on another one. The matching tool
schemas are JSON files in `TOOLS_DIR` (`workers/tools/<name>.json`), loaded by the worker bootstrap.

Everything is deterministic and offline: a small in-memory catalog stands in for the product database, payment
ids are hashes of the charge, nothing is sent anywhere. `AGENTQ_DEMO_DELAY_MS` (default 0) adds a small delay
to every activity so a demo's events can be watched as they happen.

Behaviours worth knowing for demos and tests:

- `validateOrder` and `reserveStock` raise `NonRetryableError` subclasses for bad input (no retries).
- `chargePayment` declines every card whose number ends in ``0000`` with `PaymentDeclinedError`, after its
  2 retries; an output path `†state.payment || †state.paymentError` turns that into
  `{"error": {"type": "PaymentDeclinedError", ...}}` at the last alternative and the job goes on.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import time
from pathlib import Path
from typing import Any, TypeGuard

from agentq.errors import NonRetryableError
from agentq.protocol.activities import Activity

__all__ = [
    "ACTIVITIES",
    "CATALOG",
    "TOOLS_DIR",
    "TOOL_NAMES",
    "InvalidOrderError",
    "OutOfStockError",
    "PaymentDeclinedError",
    "charge_payment",
    "quote_shipping",
    "record_audit",
    "register_activities",
    "reserve_stock",
    "send_confirmation",
    "validate_order",
]

TOOLS_DIR = Path(__file__).resolve().parent / "tools"  # shipped inside the package (package data)
TOOL_NAMES = ("validateOrder", "reserveStock", "quoteShipping", "chargePayment", "sendConfirmation", "recordAudit")

#: The product catalog: price in cents, shipping weight in grams, stock per warehouse (in preference order).
CATALOG: dict[str, dict[str, Any]] = {
    "SKU-MUG-01": {"name": "Ceramic mug", "price_cents": 1200, "weight_g": 350,
                   "stock": {"lyon": 40, "rotterdam": 120}},
    "SKU-TEE-M": {"name": "Organic T-shirt (M)", "price_cents": 1900, "weight_g": 180,
                  "stock": {"lyon": 5, "rotterdam": 60}},
    "SKU-BAG-01": {"name": "Canvas tote bag", "price_cents": 900, "weight_g": 120,
                   "stock": {"lyon": 0, "rotterdam": 25}},
    "SKU-POSTER-A2": {"name": "Poster A2", "price_cents": 1500, "weight_g": 200,
                      "stock": {"lyon": 12, "rotterdam": 0}},
    "SKU-LAMP-01": {"name": "Desk lamp", "price_cents": 4900, "weight_g": 1400,
                    "stock": {"lyon": 2, "rotterdam": 3}},
}
MAX_QUANTITY = 50
_EMAIL = re.compile(r"^[^@\s]+@[^@\s]+\.[^@\s]+$")
_EU = frozenset("AT BE BG CY CZ DE DK EE ES FI GR HR HU IE IT LT LU LV MT NL PL PT RO SE SI SK".split())
# zone -> (standard carrier, express carrier, base price, price per started 500 g, standard days)
_SHIPPING = {
    "domestic": ("Colissimo", "Chronopost", 490, 150, 2),
    "eu": ("DHL Parcel", "DHL Express", 890, 250, 4),
    "world": ("DHL Parcel International", "DHL Express", 1990, 600, 8),
}


class InvalidOrderError(NonRetryableError):
    """The order cannot be processed as given (unknown SKU, bad quantity, missing customer e-mail...)."""

    def __init__(self, message: str):
        super().__init__(message, type="InvalidOrderError")


class OutOfStockError(NonRetryableError):
    """No warehouse holds enough of a SKU."""

    def __init__(self, message: str):
        super().__init__(message, type="OutOfStockError")


class PaymentDeclinedError(Exception):
    """The card issuer declined the charge (every card number ending in 0000 does)."""


def _demo_delay() -> None:
    try:
        delay_ms = float(os.environ.get("AGENTQ_DEMO_DELAY_MS", "0") or 0)
    except ValueError:
        delay_ms = 0.0
    if delay_ms > 0:
        time.sleep(delay_ms / 1000.0)


def _digest(*parts: Any, length: int = 16) -> str:
    raw = json.dumps(parts, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(raw.encode()).hexdigest()[:length]


def _sku(value: Any) -> str:
    return str(value or "").strip().upper()


def _object(value: Any) -> dict[str, Any]:
    """`value` when it is a JSON object, else {} (the activities read optional parts of a call this way)."""
    return value if isinstance(value, dict) else {}


def _array(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_amount(value: Any) -> TypeGuard[int]:
    """A non-negative whole number of cents (not a bool)."""
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _state_view(context: Any) -> dict:
    """`context["state"]` when the call was given the state scope, else {} (also for plain-dict contexts)."""
    if context is None:
        return {}
    try:
        view = context["state"]
    except (KeyError, TypeError, IndexError):
        return {}
    return view if isinstance(view, dict) else {}


# --- activities ---------------------------------------------------------------------------------------------


def validate_order(call: dict) -> dict:
    """`validateOrder`: check an order and return it normalized (lines priced from the catalog, in cents)."""
    _demo_delay()
    order = call.get("order")
    if not isinstance(order, dict):
        raise InvalidOrderError("order must be an object with id, customer and items")
    problems: list[str] = []
    order_id = str(order.get("id") or "").strip()
    if not order_id:
        problems.append("order.id is missing")
    customer = _object(order.get("customer"))
    email = str(customer.get("email") or "").strip().lower()
    if not _EMAIL.match(email):
        problems.append(f"customer.email {customer.get('email')!r} is not an e-mail address")
    currency = str(order.get("currency") or "EUR").strip().upper()
    if not re.fullmatch(r"[A-Z]{3}", currency):
        problems.append(f"currency {order.get('currency')!r} is not a 3-letter code")
    items = order.get("items")
    if not isinstance(items, list) or not items:
        problems.append("items must be a non-empty list")
        items = []

    quantities: dict[str, int] = {}
    for i, item in enumerate(items):
        if not isinstance(item, dict):
            problems.append(f"items[{i}] must be an object with sku and quantity")
            continue
        sku, quantity = _sku(item.get("sku")), item.get("quantity")
        if sku not in CATALOG:
            problems.append(f"items[{i}].sku {item.get('sku')!r} is not in the catalog")
        if not isinstance(quantity, int) or isinstance(quantity, bool) or not 1 <= quantity <= MAX_QUANTITY:
            problems.append(f"items[{i}].quantity {quantity!r} must be an integer from 1 to {MAX_QUANTITY}")
        elif sku in CATALOG:
            quantities[sku] = quantities.get(sku, 0) + quantity
    for sku, quantity in quantities.items():
        if quantity > MAX_QUANTITY:
            problems.append(f"{sku}: {quantity} in total, more than {MAX_QUANTITY}")
    if problems:
        raise InvalidOrderError(f"order {order_id or '?'} is invalid: " + "; ".join(problems))

    lines = []
    for sku, quantity in quantities.items():  # first-seen order of the SKUs
        product = CATALOG[sku]
        lines.append({
            "sku": sku,
            "name": product["name"],
            "quantity": quantity,
            "unit_price_cents": product["price_cents"],
            "line_total_cents": product["price_cents"] * quantity,
        })
    return {
        "id": order_id,
        "status": "validated",
        "customer": {"name": str(customer.get("name") or "").strip(), "email": email},
        "currency": currency,
        "lines": lines,
        "item_count": sum(line["quantity"] for line in lines),
        "subtotal_cents": sum(line["line_total_cents"] for line in lines),
        "weight_g": sum(CATALOG[line["sku"]]["weight_g"] * line["quantity"] for line in lines),
    }


def reserve_stock(call: dict) -> dict:
    """`reserveStock`: reserve one line in the first warehouse with enough stock (one call per line)."""
    _demo_delay()
    sku, quantity = _sku(call.get("sku")), call.get("quantity")
    product = CATALOG.get(sku)
    if product is None:
        raise InvalidOrderError(f"cannot reserve {call.get('sku')!r}: not in the catalog")
    if not isinstance(quantity, int) or isinstance(quantity, bool) or quantity < 1:
        raise InvalidOrderError(f"cannot reserve {quantity!r} x {sku}: quantity must be a positive integer")
    for warehouse, available in product["stock"].items():
        if available >= quantity:
            return {"sku": sku, "reserved": quantity, "warehouse": warehouse}
    total = sum(product["stock"].values())
    raise OutOfStockError(f"{sku}: {quantity} requested, no single warehouse has that many ({total} in all)")


def quote_shipping(call: dict) -> dict:
    """`quoteShipping`: price a parcel by destination zone and catalog weight."""
    _demo_delay()
    destination = _object(call.get("destination"))
    country = str(destination.get("country") or "").strip().upper()
    if not re.fullmatch(r"[A-Z]{2}", country):
        raise NonRetryableError(f"destination.country {destination.get('country')!r} is not a 2-letter code",
                                type="InvalidAddressError")
    items = _array(call.get("items"))
    weight = 0
    for item in items:
        if isinstance(item, dict):
            product = CATALOG.get(_sku(item.get("sku")), {"weight_g": 500})  # unknown SKUs count as 500 g
            quantity = item.get("quantity")
            weight += product["weight_g"] * max(quantity if isinstance(quantity, int) else 1, 0)
    zone = "domestic" if country == "FR" else "eu" if country in _EU else "world"
    carrier, express_carrier, base, per_half_kg, days = _SHIPPING[zone]
    price = base + per_half_kg * max(1, -(-weight // 500))
    service = call.get("service") or "standard"
    if service not in ("standard", "express"):
        raise NonRetryableError(f"unknown shipping service {service!r}", type="InvalidServiceError")
    if service == "express":
        carrier, price, days = express_carrier, round(price * 1.8), max(1, days // 2)
    return {
        "carrier": carrier,
        "service": service,
        "zone": zone,
        "weight_g": weight,
        "price_cents": price,
        "currency": "EUR",
        "estimated_days": days,
    }


def _card_brand(number: str) -> str:
    if number.startswith("4"):
        return "visa"
    if number[:2] in {"51", "52", "53", "54", "55"} or number[:1] == "2":
        return "mastercard"
    if number[:2] in {"34", "37"}:
        return "amex"
    return "card"


def charge_payment(call: dict) -> dict:
    """`chargePayment`: capture amount + shipping on a card; cards ending in 0000 are declined."""
    _demo_delay()
    card = _object(call.get("card"))
    number = re.sub(r"[\s-]", "", str(card.get("number") or ""))
    if not number.isdigit() or not 12 <= len(number) <= 19:
        raise NonRetryableError("card.number must be 12 to 19 digits", type="InvalidCardError")
    amount, shipping = call.get("amount_cents"), call.get("shipping_cents") or 0
    if not (_is_amount(amount) and _is_amount(shipping)):
        raise NonRetryableError("amount_cents and shipping_cents must be non-negative integers",
                                type="InvalidAmountError")
    total = amount + shipping
    if total <= 0:
        raise NonRetryableError("nothing to charge: the total is 0", type="InvalidAmountError")
    order_id = str(call.get("orderId") or "")
    currency = str(call.get("currency") or "EUR").upper()
    last4 = number[-4:]
    if last4 == "0000":
        raise PaymentDeclinedError(
            f"card ending {last4} was declined by the issuer for {total} {currency} (order {order_id})"
        )
    return {
        "paymentId": "pay_" + _digest(order_id, last4, total, currency, call.get("description")),
        "status": "captured",
        "orderId": order_id,
        "amount_cents": total,
        "currency": currency,
        "card": {"brand": _card_brand(number), "last4": last4},
        "description": call.get("description"),
    }


def send_confirmation(call: dict, tool: dict, context: Any) -> dict:
    """`sendConfirmation`: queue (here: compose) a confirmation e-mail; with the state scope, list the lines."""
    _demo_delay()
    to = str(call.get("to") or "").strip()
    if not _EMAIL.match(to):
        raise NonRetryableError(f"cannot send to {to!r}: not an e-mail address", type="InvalidRecipientError")
    order_id = str(call.get("orderId") or "")
    template = call.get("template") or "order_confirmation"
    allowed = ((tool or {}).get("properties") or {}).get("template", {}).get("enum")
    if allowed and template not in allowed:
        raise NonRetryableError(f"unknown template {template!r}; the tool allows {allowed}",
                                type="InvalidTemplateError")
    state = _state_view(context)
    order = _object(state.get("order"))
    shipping = _object(state.get("shipping"))
    name = call.get("customerName") or _object(order.get("customer")).get("name") or "customer"
    subjects = {
        "order_confirmation": f"Your order {order_id} is confirmed",
        "payment_failed": f"Payment problem with order {order_id}",
        "shipping_update": f"Order {order_id} is on its way",
    }
    body = [f"Hello {name},", "", subjects.get(template, f"Order {order_id}") + "."]
    for line in _array(order.get("lines")):
        body.append(f"  {line.get('quantity')} x {line.get('name') or line.get('sku')}")
    if shipping.get("estimated_days") is not None:
        body.append(f"Estimated delivery: {shipping['estimated_days']} day(s) with {shipping.get('carrier')}.")
    if call.get("paymentStatus"):
        body.append(f"Payment: {call['paymentStatus']}.")
    return {
        "messageId": "msg_" + _digest(to, order_id, template),
        "to": to,
        "subject": subjects.get(template, f"Order {order_id}"),
        "body": "\n".join(body),
        "queued": True,
    }


def record_audit(call: dict) -> dict:
    """`recordAudit`: one audit entry; push it onto a list with `_outputMethod: push`."""
    _demo_delay()
    event = str(call.get("event") or "").strip()
    if not event:
        raise NonRetryableError("an audit entry needs an event name", type="InvalidAuditEntryError")
    details = _object(call.get("details"))
    order_id = call.get("orderId")
    return {
        "entryId": "aud_" + _digest(event, order_id, details, length=12),
        "event": event,
        "orderId": order_id,
        "details": details,
    }


# --- registration -------------------------------------------------------------------------------------------

#: activity name -> (handler, options for `ActivityRegistry.register`)
ACTIVITIES: dict[str, tuple[Any, dict[str, Any]]] = {
    "validateOrder": (validate_order, {"timeout": 10}),
    "reserveStock": (reserve_stock, {"retries": 1, "retry_backoff": 0.05, "timeout": 10}),
    "quoteShipping": (quote_shipping, {"retries": 1, "retry_backoff": 0.05, "timeout": 10}),
    "chargePayment": (charge_payment, {"retries": 2, "retry_backoff": 0.05, "timeout": 30, "rate_limit": "50/s"}),
    "sendConfirmation": (send_confirmation, {"retries": 3, "retry_backoff": 0.1, "timeout": 10}),
    "recordAudit": (record_audit, {}),
}


def register_activities(registry: Any) -> None:
    """Register this module's activities on `registry` (an `ActivityRegistry`)."""
    for name, (handler, options) in ACTIVITIES.items():
        registry.register(name, handler, **options)


register_activities(Activity)
