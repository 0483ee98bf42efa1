"""E-mails sent to users, rendered from named templates."""

from __future__ import annotations

TEMPLATES = {
    "welcome": "Hello {display_name}, welcome aboard!",
    "order_placed": "Hi {display_name}, your order {order_id} totals {total}.",
}


def render(template: str, **values: object) -> str:
    return TEMPLATES[template].format(**values)


class Mailer:
    def __init__(self) -> None:
        self.outbox: list[tuple[str, str]] = []

    def send(self, to: str, template: str, **values: object) -> None:
        if "@" not in to:
            raise ValueError(f"not an e-mail address: {to!r}")
        self.outbox.append((to, render(template, **values)))
