"""HTTP handlers. Framework-free: each handler takes parsed input and returns (status, body)."""

from __future__ import annotations

from dataclasses import asdict

from app.user_dto import CreateUserRequest
from app.user_service import DuplicateEmailError, UserNotFoundError, UserService


class UserController:
    def __init__(self, service: UserService):
        self._service = service

    def get(self, user_id: str) -> tuple[int, dict]:
        if not user_id.isdigit():
            return 400, {"error": "user id must be a number"}
        try:
            user = self._service.get_user(int(user_id))
        except UserNotFoundError as e:
            return 404, {"error": str(e)}
        return 200, asdict(user)

    def create(self, body: dict) -> tuple[int, dict]:
        request = CreateUserRequest(
            email=body.get("email", ""),
            display_name=body.get("display_name", ""),
            password=body.get("password", ""),
        )
        try:
            user = self._service.register(request)
        except DuplicateEmailError:
            return 409, {"error": "a user with this email already exists"}
        except ValueError as e:
            return 422, {"error": str(e)}
        return 201, asdict(user)
