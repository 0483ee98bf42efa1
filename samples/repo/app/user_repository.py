"""Storage of users. An in-memory dict here; a database in production."""

from __future__ import annotations

from dataclasses import dataclass, replace


@dataclass(frozen=True)
class UserRecord:
    id: int
    email: str
    display_name: str
    password_hash: str
    is_active: bool = True


class UserRepository:
    def __init__(self) -> None:
        self._rows: dict[int, UserRecord] = {}
        self._next_id = 1

    def find_by_id(self, user_id: int) -> UserRecord | None:
        return self._rows.get(user_id)

    def find_by_email(self, email: str) -> UserRecord | None:
        wanted = email.lower()
        return next((r for r in self._rows.values() if r.email.lower() == wanted), None)

    def insert(self, email: str, display_name: str, password_hash: str) -> UserRecord:
        record = UserRecord(self._next_id, email, display_name, password_hash)
        self._rows[record.id] = record
        self._next_id += 1
        return record

    def deactivate(self, user_id: int) -> UserRecord | None:
        record = self._rows.get(user_id)
        if record is None:
            return None
        updated = replace(record, is_active=False)
        self._rows[user_id] = updated
        return updated
