"""Secrets out, everything else untouched: a table of credentials, real traces that must pass unchanged,
idempotence, and inputs built to make a backtracking regex go quadratic."""

from __future__ import annotations

import math
import time

import pytest

from funnel.apps.state.incident_schema import Analysis, AnalysisStatus, ErrorReport, RankedFile, TriageResult
from funnel.apps.state.redact import REDACTED, is_secret_key, redact, redact_obj

AWS_KEY_ID = "AKIAIOSFODNN7EXAMPLE"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
GITHUB = "ghp_" + "a1B2c3D4e5" * 3 + "f6G7h8"
JWT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4ifQ"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)
PEM = (
    "-----BEGIN RSA PRIVATE KEY-----\n"
    "MIIEpAIBAAKCAQEA0Z3VS5JJcds3xfn/ygWyF8PbnGy0AHB7MhgHcTz6sE2I2yPB\n"
    "aFDrBz9vFqU4yQ==\n"
    "-----END RSA PRIVATE KEY-----"
)

# (input, expected output): the key name stays, the secret goes.
CASES = [
    ("password=hunter2 user=bob", f"password={REDACTED} user=bob"),
    ("login failed passwd=abc123", f"login failed passwd={REDACTED}"),
    ("secret=xyz&token=abcdef&page=2", f"secret={REDACTED}&token={REDACTED}&page=2"),
    ("api_key=k1 apikey=k2 x-api-key=k3", f"api_key={REDACTED} apikey={REDACTED} x-api-key={REDACTED}"),
    (f"aws_secret_access_key={AWS_SECRET}", f"aws_secret_access_key={REDACTED}"),
    (f"AWS_SECRET_ACCESS_KEY = {AWS_SECRET}", f"AWS_SECRET_ACCESS_KEY = {REDACTED}"),
    (f"using key {AWS_KEY_ID} in us-east-1", f"using key {REDACTED} in us-east-1"),
    ("Authorization: Bearer abc.def.ghi", f"Authorization: Bearer {REDACTED}"),
    ("authorization: Basic dXNlcjpwYXNz", f"authorization: Basic {REDACTED}"),
    ("{'Authorization': 'Bearer tok123'}", f"{{'Authorization': 'Bearer {REDACTED}'}}"),
    ('{"password": "hunter2", "user": "bob"}', f'{{"password": "{REDACTED}", "user": "bob"}}'),
    ('body={\\"password\\": \\"hunter2\\"}', f'body={{\\"password\\": \\"{REDACTED}\\"}}'),
    ("{'api_key': 'abc', 'n': 1}", f"{{'api_key': '{REDACTED}', 'n': 1}}"),
    ("db:\n  password: hunter2\n  host: db", f"db:\n  password: {REDACTED}\n  host: db"),
    ('  db_password: "s3cret"  # prod', f'  db_password: "{REDACTED}"  # prod'),
    ("tokens:\n  - token: abc", f"tokens:\n  - token: {REDACTED}"),
    ("X-Api-Key: 12345", f"X-Api-Key: {REDACTED}"),
    ("postgres://app:pa55@db:5432/main", "postgres://app:***@db:5432/main"),
    ("redis://:p@ss@cache:6379/0", "redis://:***@cache:6379/0"),
    ("slack token xoxb-1234567890-abcdefghij", f"slack token {REDACTED}"),
    ("https://hooks.slack.com/services/T000/B000/XXXXXXXX", f"https://hooks.slack.com/services/{REDACTED}"),
    (f"gh {GITHUB} done", f"gh {REDACTED} done"),
    ("github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz", REDACTED),
    ("key=sk-proj-abcdefghijklmnop1234567890", f"key={REDACTED}"),
    ("AIzaSyA-1234567890abcdefghijklmnopqrstu", REDACTED),
    (f"jwt {JWT} end", f"jwt {REDACTED} end"),
    (
        f"key:\n{PEM}\nafter",
        f"key:\n-----BEGIN RSA PRIVATE KEY-----\n{REDACTED}\n-----END RSA PRIVATE KEY-----\nafter",
    ),
    ("session 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08", f"session {REDACTED}"),
    ("signature=Zm9vYmFyYmF6cXV4MTIzNDU2Nzg5MGFiY2RlZg==", f"signature={REDACTED}"),
    ("GET /cb?access_token=abc&x=1", f"GET /cb?access_token={REDACTED}&x=1"),
    ("Bearer AbCdEfGhIjKlMnOpQrStUvWxYz012345", f"Bearer {REDACTED}"),
]


@pytest.mark.parametrize(("text", "expected"), CASES)
def test_redacts_secret_and_keeps_key(text, expected):
    assert redact(text) == expected


def test_private_key_cut_off_before_its_end_line():
    text = "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAABG5vbmU=\nTraceback (most recent call last):"
    assert (
        redact(text) == f"-----BEGIN OPENSSH PRIVATE KEY-----\n{REDACTED}\nTraceback (most recent call last):"
    )


PYTHON_TRACE = """\
Traceback (most recent call last):
  File "/app/auth/service.py", line 42, in login
    return client.login(user=user, password=password)
  File "/app/auth/client.py", line 17, in login
    token = self._load_token(path)
  File "/app/auth/client.py", line 21, in login
    session, token = cached
  File "/app/auth/client.py", line 22, in login
    user.password = pw
  File "/app/auth/client.py", line 30, in _load_token
    headers = {"Authorization": f"Bearer {token}"}
  File "/app/auth/client.py", line 31, in _load_token
    log.info("password=%s", masked)
  File "/app/auth/tokens.py", line 9, in refresh_token
    if token == "" or token_type != "bearer":
  File "/app/auth/tokens.py", line 12, in refresh_token
    api_key = settings.api_key
  File "/app/settings.py", line 3, in <module>
    secret = os.environ["APP_SECRET"]
  File "/app/llm.py", line 8, in ask
    reply = chat(messages, max_tokens=512, temperature=0.2)
  File "/app/models.py", line 5, in User
    password: str = ""
KeyError: 'password'
"""

JAVA_TRACE = """\
java.sql.SQLException: Access denied for user 'app'@'10.0.0.1' (using password: YES)
\tat com.mysql.cj.jdbc.exceptions.SQLError.createSQLException(SQLError.java:129)
\tat com.example.auth.TokenService.refresh(TokenService.java:88)
\tat com.example.secret.VaultClient.read(VaultClient.java:41)
\tat com.example.web.ApiKeyFilter.doFilter(ApiKeyFilter.java:57)
\tat org.springframework.web.filter.OncePerRequestFilter.doFilter(OncePerRequestFilter.java:117)
Caused by: java.net.ConnectException: Connection refused (Connection refused)
\t... 42 more
"""


@pytest.mark.parametrize("trace", [PYTHON_TRACE, JAVA_TRACE], ids=["python", "java"])
def test_ordinary_traces_pass_unchanged(trace):
    assert redact(trace) == trace


def test_redaction_is_idempotent():
    text = "\n".join(t for t, _ in CASES) + PYTHON_TRACE
    once = redact(text)
    assert redact(once) == once


def test_a_secret_inside_a_trace_goes_and_the_trace_stays():
    trace = PYTHON_TRACE.replace(
        "KeyError: 'password'", "ValueError: cannot connect to postgres://app:hunter2@db/x"
    )
    out = redact(trace)
    assert "hunter2" not in out
    assert out.replace("postgres://app:***@db/x", "postgres://app:hunter2@db/x") == trace


def test_redact_obj_walks_dicts_lists_and_models():
    data = {
        "context": {"db_password": "plain-looking", "region": "eu", "Authorization": "Basic Zm9v"},
        "items": ["ok", f"key {AWS_KEY_ID}", ("t", "password=x")],
        "n": 3,
        "none": None,
    }
    out = redact_obj(data)
    assert out == {
        "context": {"db_password": REDACTED, "region": "eu", "Authorization": REDACTED},
        "items": ["ok", f"key {REDACTED}", ("t", f"password={REDACTED}")],
        "n": 3,
        "none": None,
    }
    report = ErrorReport(service="api", message=f"token={GITHUB}", context={"api_key": "abc"})
    clean = redact_obj(report)
    assert isinstance(clean, ErrorReport)
    assert clean.context == {"api_key": REDACTED}
    assert GITHUB not in clean.model_dump_json()


def test_redact_obj_on_a_triage_result():
    result = TriageResult(
        service="api",
        exception_type="ValueError",
        message=f"bad jwt {JWT}",
        fingerprint="fp1",
        files=[RankedFile(path="a.py", rank=1, score=1.0, excerpt=f'KEY = "{AWS_KEY_ID}"')],
        analysis=Analysis(summary="s", root_cause="password=hunter2 leaked", confidence=0.5),
        analysis_status=AnalysisStatus.OK,
    )
    clean = redact_obj(result)
    assert isinstance(clean, TriageResult)
    dumped = clean.model_dump_json()
    for secret in (JWT, AWS_KEY_ID, "hunter2"):
        assert secret not in dumped
    assert clean.analysis.confidence == 0.5 and clean.files[0].score == 1.0


@pytest.mark.parametrize(
    ("name", "secret"),
    [("DB_PASSWORD", True), ("x-api-key", True), ("client_secret", True), ("Authorization", True),
     ("max_tokens", False), ("token_type", False), ("region", False), ("keyboard", False)],
)  # fmt: skip
def test_is_secret_key(name, secret):
    assert is_secret_key(name) is secret


# --- linear time ------------------------------------------------------------------------------------

ADVERSARIAL = {
    "trace": lambda n: (PYTHON_TRACE + JAVA_TRACE + "\n".join(t for t, _ in CASES)) * (n // 4000 + 1),
    "one-run": lambda n: "a" * n,
    "keywords": lambda n: "password_" * (n // 9),
    "jwt-starts": lambda n: "eyJ" * (n // 3),
    "pem-begins": lambda n: "-----BEGIN RSA PRIVATE KEY-----\n" * (n // 32),
    "url-userinfo": lambda n: "://" + "a:" * (n // 2),
    "open-quotes": lambda n: 'password="' + '\\"' * (n // 2),
    "spaces": lambda n: "password: x" + " " * n + "y",
    "sk-runs": lambda n: "sk-" * (n // 3),
    "auth-headers": lambda n: "Authorization: " * (n // 15),
    "assignments": lambda n: "token = x " * (n // 10),
    "traceback-lines": lambda n: '  File "a.py", line 1, in f\n    token = tok\n' * (n // 40),
}


@pytest.mark.slow
def test_a_ten_megabyte_trace_in_a_few_seconds():
    text = ADVERSARIAL["trace"](10_000_000)[:10_000_000]
    start = time.perf_counter()
    out = redact(text)
    elapsed = time.perf_counter() - start
    assert AWS_KEY_ID not in out and GITHUB not in out
    # ~1 s on an idle core; the bound leaves room for a loaded machine. Quadratic would take hours.
    assert elapsed < 120, f"{elapsed:.1f}s"


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(ADVERSARIAL))
def test_inputs_built_to_backtrack_stay_linear(kind):
    text = ADVERSARIAL[kind](2_000_000)[:2_000_000]
    start = time.perf_counter()
    redact(text)
    elapsed = time.perf_counter() - start
    # ~0.5 s idle; 8.9 s was seen at a load average of 15. Quadratic in 2 MB is ~10^12 steps: hours.
    assert elapsed < 60, f"{kind}: {elapsed:.1f}s"


@pytest.mark.slow
def test_time_grows_linearly():
    """Four times the input takes about four times as long (quadratic would be sixteen)."""
    for kind in ("jwt-starts", "url-userinfo", "keywords", "pem-begins", "open-quotes"):
        times = []
        for n in (250_000, 1_000_000):
            text = ADVERSARIAL[kind](n)[:n]
            best = math.inf
            for _ in range(3):  # the best of three: a busy machine only ever adds time
                start = time.perf_counter()
                redact(text)
                best = min(best, time.perf_counter() - start)
            times.append(best)
        assert times[1] < 10 * times[0] + 0.05, f"{kind}: {times}"
