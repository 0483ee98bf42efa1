"""Data transfer objects: what the HTTP layer sends and receives."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class UserDto:
    """A user as the API returns it. The password hash never leaves the service."""

    id: int
    email: str
    display_name: str
    is_active: bool


@dataclass(frozen=True)
class CreateUserRequest:
    email: str
    display_name: str
    password: str

    def validate(self) -> list[str]:
        problems = []
        if "@" not in self.email:
            problems.append("email must contain '@'")
        if len(self.password) < 12:
            problems.append("password must be at least 12 characters")
        if not self.display_name.strip():
            problems.append("display name must not be blank")
        return problems
