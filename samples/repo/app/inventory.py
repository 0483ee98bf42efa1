"""Stock levels per SKU, with reservations held until an order is paid or cancelled."""

from __future__ import annotations


class OutOfStockError(RuntimeError):
    def __init__(self, sku: str, wanted: int, available: int):
        super().__init__(f"{sku}: wanted {wanted}, only {available} available")
        self.sku = sku


class Inventory:
    def __init__(self, stock: dict[str, int]):
        self._stock = dict(stock)
        self._reserved: dict[str, int] = {}

    def available(self, sku: str) -> int:
        return self._stock[sku] - self._reserved.get(sku, 0)

    def reserve(self, sku: str, quantity: int) -> None:
        free = self.available(sku)
        if quantity > free:
            raise OutOfStockError(sku, quantity, free)
        self._reserved[sku] = self._reserved.get(sku, 0) + quantity

    def release(self, sku: str, quantity: int) -> None:
        self._reserved[sku] -= quantity
