"""Business rules for users: lookup, registration, deactivation."""

from __future__ import annotations

import hashlib

from app.user_dto import CreateUserRequest, UserDto
from app.user_repository import UserRecord, UserRepository


class UserNotFoundError(LookupError):
    """Raised when a user id or email does not match any stored user."""

    def __init__(self, key: object):
        super().__init__(f"user {key!r} not found")
        self.key = key


class DuplicateEmailError(ValueError):
    pass


class UserService:
    def __init__(self, repository: UserRepository):
        self._repository = repository

    def get_user(self, user_id: int) -> UserDto:
        record = self._repository.find_by_id(user_id)
        if record is None:
            raise UserNotFoundError(user_id)
        if not record.is_active:
            # Deactivated users are hidden from every caller, as if they did not exist.
            raise UserNotFoundError(user_id)
        return _to_dto(record)

    def register(self, request: CreateUserRequest) -> UserDto:
        problems = request.validate()
        if problems:
            raise ValueError("; ".join(problems))
        if self._repository.find_by_email(request.email) is not None:
            raise DuplicateEmailError(request.email)
        password_hash = hashlib.sha256(request.password.encode()).hexdigest()
        record = self._repository.insert(request.email, request.display_name, password_hash)
        return _to_dto(record)

    def deactivate(self, user_id: int) -> UserDto:
        record = self._repository.deactivate(user_id)
        if record is None:
            raise UserNotFoundError(user_id)
        return _to_dto(record)


def _to_dto(record: UserRecord) -> UserDto:
    return UserDto(record.id, record.email, record.display_name, record.is_active)
