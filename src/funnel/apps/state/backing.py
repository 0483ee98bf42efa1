"""What every store shares, whatever holds it: connections from its backing (a `sqlite.SqliteFile` or a
`tables.ComponentTables`, which hand out the same two), and a repr that says where it is without a password."""

from __future__ import annotations

from contextlib import AbstractContextManager


class Backed:
    """A store whose `_backing` gives `connection()` and `transaction()`; `_where()` names it in the repr."""

    _backing: object

    def _where(self) -> str:
        raise NotImplementedError

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self._where()!r})"

    def _connection(self) -> AbstractContextManager:
        return self._backing.connection()

    def _transaction(self) -> AbstractContextManager:
        return self._backing.transaction()
