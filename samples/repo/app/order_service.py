"""Orders: lines of SKUs and quantities, priced, taxed and reserved against the inventory."""

from __future__ import annotations

import json
from dataclasses import dataclass

from app.inventory import Inventory
from app.pricing import apply_discount, tax_for, unit_price


@dataclass(frozen=True)
class OrderLine:
    sku: str
    quantity: int
    price_cents: int


class OrderService:
    def __init__(self, inventory: Inventory, region: str):
        self._inventory = inventory
        self._region = region

    def parse_lines(self, payload: str) -> list[OrderLine]:
        data = json.loads(payload)
        return [OrderLine(line["sku"], int(line["quantity"]), int(line["price_cents"])) for line in data["lines"]]

    def place(self, lines: list[OrderLine], discount_percent: int = 0) -> dict:
        for line in lines:
            self._inventory.reserve(line.sku, line.quantity)
        subtotal = sum(line.quantity * line.price_cents for line in lines)
        discounted = apply_discount(subtotal, discount_percent)
        return {"subtotal": subtotal, "total": discounted + tax_for(discounted, self._region)}

    def average_unit_price(self, lines: list[OrderLine]) -> int:
        return unit_price(sum(l.quantity * l.price_cents for l in lines), sum(l.quantity for l in lines))
