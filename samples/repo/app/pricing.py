"""Prices, discounts and taxes. Amounts are integer cents; rates are percentages."""

from __future__ import annotations

from decimal import ROUND_HALF_UP, Decimal

TAX_RATES = {"DE": 19, "FR": 20, "US-CA": 7, "US-NY": 4}


def apply_discount(amount_cents: int, percent: int) -> int:
    if not 0 <= percent <= 100:
        raise ValueError(f"discount must be between 0 and 100 percent, got {percent}")
    return amount_cents - amount_cents * percent // 100


def tax_for(amount_cents: int, region: str) -> int:
    rate = TAX_RATES[region]  # an unknown region is a configuration error: fail loudly
    return int((Decimal(amount_cents) * rate / 100).quantize(Decimal(1), rounding=ROUND_HALF_UP))


def unit_price(total_cents: int, quantity: int) -> int:
    """Average price per unit of an order line."""
    return total_cents // quantity
