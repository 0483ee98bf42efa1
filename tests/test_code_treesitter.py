"""Tree-sitter code splitting: one section per definition for Java, JavaScript, TypeScript and Go. Offline."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from funnel.embed import HashingEmbedder
from funnel.ingest import chunk_document, code_treesitter, discover, load
from funnel.ingest.code import CLASS_SPLIT_LINES, heuristic_spans, load_code
from funnel.ingest.code_treesitter import treesitter_spans

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

JAVA = """\
package com.example.users;

import java.util.List;
import org.springframework.stereotype.Service;

/**
 * Users, read through the repository.
 */
@Service
@RequiredArgsConstructor
public class UserService {
    private static final int LIMIT = 100;
    private final UserRepository repository;

    /** Finds one user or throws. */
    @Transactional(readOnly = true)
    public User getUser(long id) {
        return repository.findById(id)
            .orElseThrow(() -> new UserNotFoundException(id));
    }

    public List<User> listUsers(int page) {
        return repository.findAll(page, LIMIT);
    }

    @Override
    public String toString() {
        return "UserService";
    }

    // What listUsers returns, one page at a time.
    static final class Page {
        int number;
        int size;
    }
}

interface UserRepository {
    Optional<User> findById(long id);
}
"""

JAVA_SPANS = [
    (None, 1, 4),
    ("UserService", 6, 13),  # Javadoc, annotations, header and fields
    ("UserService.getUser", 15, 20),
    ("UserService.listUsers", 22, 24),
    ("UserService.toString", 26, 29),
    ("UserService.Page", 31, 36),  # the class's closing brace goes with its last member
    ("UserRepository", 38, 40),
]

JAVASCRIPT = """\
import { db } from "./db.js";
import logger from "./logger.js";

/**
 * Loads users and keeps them.
 */
class UserService {
  #cache = new Map();
  static instances = 0;

  constructor(repo) {
    this.repo = repo;
    UserService.instances += 1;
  }

  // Finds a user or throws.
  async getUser(id) {
    if (this.#cache.has(id)) {
      return this.#cache.get(id);
    }
    const user = await this.repo.find(id);
    this.#cache.set(id, user);
    return user;
  }

  onEvict = (id) => {
    this.#cache.delete(id);
  };
}

const toDto = (user) => ({ id: user.id, name: user.name });

export const formatUser = async (user) => {
  logger.info("format", user.id);
  return `${user.name} <${user.email}>`;
};

export function parseId(raw) {
  return Number.parseInt(raw, 10);
}

export const service = new UserService(db);
"""

JAVASCRIPT_SPANS = [
    (None, 1, 2),
    ("UserService", 4, 9),
    ("UserService.constructor", 11, 14),
    ("UserService.getUser", 16, 24),
    ("UserService.onEvict", 26, 29),
    ("toDto", 31, 31),
    ("formatUser", 33, 36),
    ("parseId", 38, 40),
    (None, 42, 42),
]

TYPESCRIPT = """\
import { HostListener, Injectable } from "@angular/core";
import type { Observable } from "rxjs";

/** A user as the API returns it. */
export interface User {
  id: number;
  name: string;
  email?: string;
}

export type UserId = User["id"];

export enum Role {
  Admin = "admin",
  Member = "member",
}

@Injectable({ providedIn: "root" })
export class UserStore {
  private readonly users = new Map<UserId, User>();
  private role: Role = Role.Member;

  constructor(private readonly http: HttpClient) {}

  /** Loads one user, from the cache when it can. */
  @Memoize()
  get(id: UserId): Observable<User> {
    return this.http.get<User>(`/api/users/${id}`);
  }

  @HostListener("window:focus")
  refresh(): void {
    this.users.clear();
  }

  handleError = (error: unknown): never => {
    throw error;
  };

  private static key(id: UserId): string {
    return String(id);
  }
}

export const isAdmin = (user: User, role: Role): boolean => role === Role.Admin;
"""

TYPESCRIPT_SPANS = [
    (None, 1, 2),
    ("User", 4, 9),
    ("UserId", 11, 11),
    ("Role", 13, 16),
    ("UserStore", 18, 21),
    ("UserStore.constructor", 23, 23),
    ("UserStore.get", 25, 29),  # doc comment and the decorator, a sibling node in TypeScript
    ("UserStore.refresh", 31, 34),
    ("UserStore.handleError", 36, 38),
    ("UserStore.key", 40, 43),
    ("isAdmin", 45, 45),
]

GO = """\
// Package users serves user records.
package users

import (
\t"context"
\t"errors"
)

// ErrNotFound is returned when no user has the id.
var ErrNotFound = errors.New("user not found")

// User is one account.
type User struct {
\tID    int64
\tName  string
\tEmail string
}

// UserService reads users through a Store.
type UserService struct {
\tstore Store
\tcache map[int64]*User
}

type (
\t// Store loads users.
\tStore interface {
\t\tLoad(ctx context.Context, id int64) (*User, error)
\t}
\tUserID = int64
)

// NewUserService builds a service over store.
func NewUserService(store Store) *UserService {
\treturn &UserService{store: store, cache: map[int64]*User{}}
}

// Get returns the user with id, from the cache when it can.
func (s *UserService) Get(ctx context.Context, id int64) (*User, error) {
\tif u, ok := s.cache[id]; ok {
\t\treturn u, nil
\t}
\tu, err := s.store.Load(ctx, id)
\tif err != nil {
\t\treturn nil, err
\t}
\ts.cache[id] = u
\treturn u, nil
}

func (s UserService) Size() int { return len(s.cache) }
"""

GO_SPANS = [
    (None, 1, 10),
    ("User", 12, 17),
    ("UserService", 19, 23),
    ("Store", 25, 29),  # a grouped declaration is one span per type
    ("UserID", 30, 31),
    ("NewUserService", 33, 36),
    ("UserService.Get", 38, 49),
    ("UserService.Size", 51, 51),
]

CASES = {
    "UserService.java": (JAVA, JAVA_SPANS),
    "user_service.js": (JAVASCRIPT, JAVASCRIPT_SPANS),
    "user_store.ts": (TYPESCRIPT, TYPESCRIPT_SPANS),
    "users.go": (GO, GO_SPANS),
}


def write(path: Path, content: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content, encoding="utf-8")
    return path


def spans_of(tmp_path: Path, name: str, source: str) -> list[tuple[str | None, int, int]]:
    loaded = load_code(write(tmp_path / name, source), "c", name)
    return [(s.heading, s.line_start, s.line_end) for s in loaded.sections]


@pytest.mark.parametrize("name", sorted(CASES))
def test_one_section_per_definition_with_exact_spans(tmp_path, name):
    source, expected = CASES[name]
    assert spans_of(tmp_path, name, source) == expected


@pytest.mark.parametrize("name", sorted(CASES))
def test_every_line_lands_in_exactly_one_section(tmp_path, name):
    source, _ = CASES[name]
    loaded = load_code(write(tmp_path / name, source), "c", name)
    lines = source.split("\n")
    covered: list[int] = []
    for section in loaded.sections:
        assert section.text == "\n".join(lines[section.line_start - 1 : section.line_end])
        covered.extend(range(section.line_start, section.line_end + 1))
    assert covered == sorted(set(covered))  # in order, no line twice
    assert {n for n, line in enumerate(lines, start=1) if line.strip()} <= set(covered)


def test_split_class_methods_are_named_by_their_class(tmp_path):
    headings = [h for h, _, _ in spans_of(tmp_path, "UserService.java", JAVA)]
    assert "UserService.getUser" in headings and "getUser" not in headings
    assert 36 - 6 + 1 > CLASS_SPLIT_LINES  # the class (lines 6-36) is long enough to be split


def test_short_class_stays_whole_with_its_nested_definitions(tmp_path):
    source = """\
@Entity
public class User {
    private long id;

    public long getId() { return id; }

    static class Builder {
        long id;
    }
}
"""
    assert spans_of(tmp_path, "User.java", source) == [("User", 1, 10)]


def test_long_enum_is_split_after_its_constants(tmp_path):
    constants = [f'    S{i}("s{i}"),' for i in range(22)]  # lines 2-23
    source = "\n".join(
        ["public enum Status {", *constants, "    ;", "    private final String label;", ""]
        + ["    Status(String label) {", "        this.label = label;", "    }", ""]
        + ["    public String label() {", "        return label;", "    }", "}", ""]
        + ["record Point(int x, int y) {}", ""]
    )
    assert spans_of(tmp_path, "Status.java", source) == [
        ("Status", 1, 25),
        ("Status.Status", 27, 29),
        ("Status.label", 31, 34),
        ("Point", 36, 36),
    ]


def test_commonjs_assignments_read_like_a_stack_trace(tmp_path):
    source = """\
function UserRepo(db) {
  this.db = db;
}
UserRepo.prototype.find = function (id) {
  return this.db.get(id);
};
module.exports.findAll = async () => [];
exports.remove = function remove(id) {};
module.exports = class UserController {};
"""
    assert spans_of(tmp_path, "repo.js", source) == [
        ("UserRepo", 1, 3),
        ("UserRepo.find", 4, 6),
        ("findAll", 7, 7),
        ("remove", 8, 8),
        ("UserController", 9, 9),
    ]


def test_tsx_uses_the_tsx_grammar(tmp_path):
    source = """\
export const Badge = ({ name }: { name: string }) => <span className="badge">{name}</span>;

export default function Page(): JSX.Element {
  return <Badge name="x" />;
}
"""
    assert spans_of(tmp_path, "page.tsx", source) == [("Badge", 1, 1), ("Page", 3, 5)]


def test_two_definitions_on_one_line_share_a_section(tmp_path):
    assert spans_of(tmp_path, "min.js", "function a() {} function b() {}\n") == [("a", 1, 1)]


def test_syntax_errors_keep_the_tree_where_it_is_usable(tmp_path):
    source = "public class A {\n    void f() {\n        int x = ;\n    }\n}\n\nclass B { }\n"
    assert spans_of(tmp_path, "A.java", source) == [("A", 1, 5), ("B", 7, 7)]


def test_file_that_is_mostly_errors_falls_back_to_the_heuristic(tmp_path):
    source = "def load(x):\n    return x\n\nclass Cache:\n    pass\n"  # Python, misnamed
    assert treesitter_spans(source, "java", "Cache.java", CLASS_SPLIT_LINES) is None
    assert [(s.heading, s.start, s.end) for s in heuristic_spans(source.split("\n"))] == [
        ("load", 1, 3),
        ("Cache", 4, 6),
    ]
    assert spans_of(tmp_path, "Cache.java", source) == [("load", 1, 2), ("Cache", 4, 5)]  # blank ends trimmed


def test_missing_grammar_package_falls_back_to_the_heuristic(tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "tree_sitter_go", None)  # import now raises ImportError
    monkeypatch.setattr(code_treesitter, "_parsers", {})
    assert treesitter_spans(GO, "go", "users.go", CLASS_SPLIT_LINES) is None
    loaded = load_code(write(tmp_path / "users.go", GO), "c", "users.go")
    headings = [s.heading for s in loaded.sections]
    assert "UserService.Get" in headings and "NewUserService" in headings


def test_languages_without_a_grammar_are_not_ours():
    assert treesitter_spans("fn main() {}\n", "rust", "main.rs", CLASS_SPLIT_LINES) is None
    assert treesitter_spans("x = 1\n", None, "x", CLASS_SPLIT_LINES) is None


def test_parser_is_built_once_per_grammar():
    first = code_treesitter._parser("java")
    assert first is not None and code_treesitter._parser("java") is first


def test_repository_ingest_with_every_language(tmp_path):
    for name, (source, _) in CASES.items():
        write(tmp_path / "repo" / name, source)
    result = discover([tmp_path / "repo", SAMPLES / "repo"])
    assert result.problems == []
    tok = HashingEmbedder()
    headings: set[str | None] = set()
    for source_file in result.files:
        loaded = load(source_file, result.display_path(source_file), result.display_path(source_file))
        chunks = chunk_document(loaded, tok)
        assert chunks
        headings.update(c.heading for c in chunks)
    assert {"UserService.getUser", "UserStore.get", "UserService.Get", "formatUser"} <= headings
    assert any(h and h.startswith("UserService.get_user") for h in headings)  # samples/repo, Python
