"""Secrets out before anything leaves the machine: Slack, a remote LLM, the incident store on disk.

`redact(text)` replaces what looks like a credential with `[REDACTED]`, keeping the key name so a trace
stays readable (`password=[REDACTED]`, `"token": "[REDACTED]"`, `Authorization: Bearer [REDACTED]`,
`postgres://app:***@db`). `redact_obj(obj)` does the same through dicts, lists and pydantic models, and
also blanks a string value whose dict key names a secret (`{"db_password": "x"}`).

What is caught:
- by shape, anywhere: AWS access key ids (AKIA/ASIA...), Slack tokens (xox?-, xapp-) and webhook URLs,
  GitHub tokens (ghp_, gho_, ghu_, ghs_, ghr_, github_pat_), OpenAI-style `sk-...` keys, Google API keys
  (AIza...), JWTs, PEM private key blocks (a block cut off before its END line too), user:password in URLs,
  `Authorization:` headers and long `Bearer` tokens;
- by key name (password, passwd, passphrase, secret, token, api_key/apikey/x-api-key, access_key,
  private_key, credentials, ...): a quoted value after `:` or `=` (JSON, Python, YAML), an unquoted value
  after `=` (query strings, env files, log lines), and an unquoted value after `:` when the key starts a line
  (YAML, HTTP headers);
- a long hex/base64 string that looks random after a looser key word (key, secret, auth, signature,
  session, cookie, salt, ...).

Ordinary code is left alone: a value that is a call (`token = fetch_token()`), a subscript, a variable named
like a secret (`password=password`, `api_key=settings.api_key`), None/True/False/null, a format placeholder
(`%s`) or an already masked value is not a secret. A short bare variable (`token = tok`) cannot be told from
a password (`password = hunter2`) and is redacted.

Every pattern is anchored on a literal or a character-class boundary and has no nested ambiguous
repetition, so the work is linear in the input (a 10 MB trace takes well under the time an LLM call does).
"""

from __future__ import annotations

from enum import Enum

import math
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

REDACTED = "[REDACTED]"

# Key names whose value is a secret. Matched keyword-first (the regex engine then starts only where a keyword
# is), so `aws_secret_access_key`, `DB_PASSWORD`, `x-api-key` and `client_secret` all hit on their last word.
_KEYWORD = (
    r"(?:passw(?:or)?d|passphrase|secret|(?<!unk_)(?<!pad_)(?<!bos_)(?<!eos_)(?<!cls_)(?<!sep_)(?<!mask_)token"
    r"|api[_-]?key|apikey|access[_-]?key|private[_-]?key"
    r"|credentials?|auth[_-]?key|signing[_-]?key|encryption[_-]?key)"
)
_Q = r"(?:\\?[\"'])"  # a quote, maybe escaped (JSON inside a JSON string)

# --- secrets recognisable by their shape ------------------------------------------------------------

_JWT = re.compile(r"(?<![\w-])eyJ[A-Za-z0-9_-]{4,}\.eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]*")
_SLACK_WEBHOOK = re.compile(r"(?i)(https?://hooks\.slack\.com/(?:services|workflows|triggers)/)[\w/-]+")
_TOKENS = re.compile(
    r"(?<![\w-])(?:"
    r"xox[abposr]-[A-Za-z0-9-]{10,}"
    r"|xapp-[A-Za-z0-9-]{10,}"
    r"|gh[pousr]_[A-Za-z0-9]{30,}"
    r"|github_pat_[A-Za-z0-9_]{30,}"
    r"|sk-(?=[A-Za-z0-9_-]*[0-9])[A-Za-z0-9_-]{20,}"
    r"|AIza[0-9A-Za-z_-]{35}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}(?![0-9A-Za-z])"
    r")"
)
# scheme://user:password@host -> scheme://user:***@host. The password may hold '@' (greedy to the last one).
_URL_USERINFO = re.compile(r"://([^\s:/?#@'\"<>]*):([^\s/?#'\"<>]+)@")
_PEM_BEGIN = re.compile(r"-----BEGIN ([A-Z0-9 ]{0,40}?)PRIVATE KEY( BLOCK)?-----")
# The body of a block whose END line is missing (a trace cut mid-key): base64 lines and PEM headers.
_PEM_BODY = re.compile(
    r"(?:(?:Proc-Type|DEK-Info|Comment|Version):[^\n]*\n|[A-Za-z0-9+/=\\]*\r?\n)*"
    r"(?:[A-Za-z0-9+/=\\]+(?=[\"']|\r?\n|\Z))?"
)

# --- secrets recognisable by the key in front of them -----------------------------------------------
# These are matched on `text.lower()` (a literal-first pattern there is many times faster than IGNORECASE)
# and spliced into the original by position; so they are written in lower case.

_AUTH_HEADER = (
    rf"((?:proxy-)?authorization{_Q}?[ \t]*[:=][ \t]*{_Q}?)"
    r"(?:(?:bearer|basic|token|digest|negotiate|apikey)[ \t]+)?+([^\s\"'\\,;(){}\[\]`]+)"
)
_BEARER = r"bearer[ \t]+([a-z0-9._~+/-]{20,}=*)"
# "password": "x"   password="x"   'api_key': 'x'   password: "x"   \"token\": \"x\"
_QUOTED = (
    rf"{_KEYWORD}({_Q}?)([ \t]*[:=](?!=)[ \t]*)"
    r"(?:\"((?:[^\"\\\n]|\\.)*+)\"|'((?:[^'\\\n]|\\.)*+)'|\\\"([^\"\\\n]*+)\\\")"
)
# password=hunter2   ?access_token=abc&   DB_PASSWORD = s3cret
_UNQUOTED = rf"{_KEYWORD}{_Q}?[ \t]*=(?!=)[ \t]*([^\s\"'\\&;,()\[\]{{}}<>|`]+)"
# A YAML key or an HTTP header that starts a line:   password: hunter2   X-Api-Key: abc
_LINE_KEY = rf"{_KEYWORD}[ \t]*:[ \t]+([^\s'\"#|>&*\[{{][^\n#]*)"
# A long random-looking value after a looser key word: "session 9f86d081...", "signature=Zm9v..."
_LOOSE_KEYWORD = (
    r"(?:key|secret|token|auth|signature|sig|hmac|salt|session(?:[_-]?id)?|cookie|credentials?"
    r"|passw(?:or)?d|private)s?"
)
_LOOSE = (
    rf"({_LOOSE_KEYWORD}{_Q}?(?:[ \t]*[:=][ \t]*|[ \t]+){_Q}?)"
    r"([a-z0-9+/_-]{20,}={0,2})(?![a-z0-9+/=_-])"
)

_NOT_SECRET = {
    "none", "null", "nil", "true", "false", "undefined", "yes", "no", "str", "bytes", "string", "int",
    "secretstr", "optional", "redacted",
}  # fmt: skip
_PLACEHOLDER = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfxi]|\*+|\$\w*|\?|:\w+")
_IDENTIFIER_CHAIN = re.compile(r"[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*")
_ENDS_WITH_KEYWORD = re.compile(rf"(?i).*?{_KEYWORD}")
_FIRST_WORD = re.compile(r"[A-Za-z_]\w*")
_AUTH_SCHEMES = {"bearer", "basic", "token", "digest", "negotiate", "apikey"}
_REFERENCE_WORDS = ("key", "pw", "pwd", "cred", "creds", "auth", "secret", "token", "password", "passwd")
_PY_FRAME_LINE = re.compile(r'[ \t]*File "[^"\n]*", line \d+')
_HEX = re.compile(r"[0-9a-fA-F]+")

_Splice = Callable[[re.Match, str], "str | None"]


class _Folded:
    """A lower-case pattern run on `text.lower()`, its replacement built from the original text."""

    def __init__(self, pattern: str, replace: _Splice):
        self.lower = re.compile(pattern)
        self.ignorecase = re.compile(pattern, re.IGNORECASE)
        self.replace = replace

    def sub(self, text: str) -> str:
        folded = text.lower()
        # lower() maps every character to one or more; equal lengths mean positions line up one to one.
        matches = self.lower.finditer(folded) if len(folded) == len(text) else self.ignorecase.finditer(text)
        parts, pos = [], 0
        for m in matches:
            replacement = self.replace(m, text)
            if replacement is not None:
                parts += (text[pos : m.start()], replacement)
                pos = m.end()
        if not parts:
            return text
        parts.append(text[pos:])
        return "".join(parts)


def redact(text: str) -> str:
    """`text` with every secret funnel recognises replaced by `[REDACTED]` (the key name kept)."""
    if not text:
        return text
    text = _redact_pem(text)
    text = _JWT.sub(REDACTED, text)
    text = _SLACK_WEBHOOK.sub(lambda m: m.group(1) + REDACTED, text)
    text = _TOKENS.sub(REDACTED, text)
    if "://" in text:
        text = _URL_USERINFO.sub(_userinfo, text)
    for rule in _KEYED:
        text = rule.sub(text)
    return text


def _construct(model: type[BaseModel], data: Any) -> Any:
    """`model` from its redacted dump without validation, nested models rebuilt the same way."""
    if not isinstance(data, dict):
        return data
    values = {}
    for name, field in model.model_fields.items():
        if name not in data:
            continue
        value, annotation = data[name], field.annotation
        inner = getattr(annotation, "__args__", None)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            value = _construct(annotation, value)
        elif isinstance(annotation, type) and issubclass(annotation, Enum) and value is not None:
            value = annotation(value)
        elif inner and isinstance(value, list) and isinstance(inner[0], type) and issubclass(inner[0], BaseModel):
            value = [_construct(inner[0], v) for v in value]
        elif inner and isinstance(value, dict):
            model_arg = next((a for a in inner if isinstance(a, type) and issubclass(a, BaseModel)), None)
            value = _construct(model_arg, value) if model_arg else value
        values[name] = value
    return model.model_construct(**values)


def redact_obj(obj: Any) -> Any:
    """`obj` with `redact` applied to every string in it; a pydantic model comes back as the same type.

    A non-empty string under a dict key that names a secret (`password`, `db_password`, `x-api-key`, ...)
    is replaced whole, whatever it looks like.
    """
    if isinstance(obj, str):
        return redact(obj)
    if isinstance(obj, BaseModel):
        # model_construct: redaction lengthens text ("[REDACTED]"), which must not fail a length limit.
        return _construct(type(obj), redact_obj(obj.model_dump(mode="json")))
    if isinstance(obj, dict):
        out = {}
        for key, value in obj.items():
            if isinstance(key, str) and isinstance(value, str) and value and is_secret_key(key):
                out[redact(key)] = REDACTED
            else:
                out[redact(key) if isinstance(key, str) else key] = redact_obj(value)
        return out
    if isinstance(obj, (list, tuple)):
        return type(obj)(redact_obj(v) for v in obj)
    return obj


def is_secret_key(name: str) -> bool:
    """Whether a key or header name says its value is a secret (`DB_PASSWORD`, `x-api-key`)."""
    return _ENDS_WITH_KEYWORD.fullmatch(name) is not None or name.lower() in (
        "authorization",
        "proxy-authorization",
        "cookie",
        "set-cookie",
    )


# --- replacements: None keeps the match as it is ------------------------------------------------------


def _userinfo(m: re.Match) -> str:
    if m.group(2) == "***":
        return m.group(0)
    return f"://{m.group(1)}:***@"


def _auth_header(m: re.Match, text: str) -> str | None:
    value, start, end = text[m.start(2) : m.end(2)], m.start(2), m.end()
    if start > m.end(1):  # after a scheme word ("Bearer x.y.z") the value is a credential, unless a stand-in
        keep = value.startswith(REDACTED) or _PLACEHOLDER.fullmatch(value) is not None
    else:
        string_prefix = len(value) <= 2 and value.isalpha() and end < len(text) and text[end] in "\"'"
        keep = (
            string_prefix
            or value.lower() in _AUTH_SCHEMES
            or _is_code_or_placeholder(value, text, start, end)
        )
    # kept: headers={"Authorization": f"Bearer {t}"}, {"Authorization": token}, "Authorization: Bearer"
    return None if keep else text[m.start() : start] + REDACTED


def _bearer(m: re.Match, text: str) -> str:
    return text[m.start() : m.start(1)] + REDACTED


def _quoted(m: re.Match, text: str) -> str | None:
    g = next(g for g in (3, 4, 5) if m.group(g) is not None)
    value = text[m.start(g) : m.end(g)]
    if not value or value == REDACTED:
        return None
    if "=" in m.group(2) and not m.group(1) and _key_opens_string(text, m.start()):
        return None  # "password=" + pw: the key ends a string literal, the quote after = closes it
    return text[m.start() : m.start(g)] + REDACTED + text[m.end(g) : m.end()]


def _key_start(text: str, i: int) -> int:
    stop = max(0, i - 200)
    while i > stop and (text[i - 1].isalnum() or text[i - 1] in "_.-"):
        i -= 1
    return i


def _key_opens_string(text: str, i: int) -> bool:
    i = _key_start(text, i)
    return i > 0 and text[i - 1] in "\"'"


def _starts_line(text: str, i: int) -> bool:
    i = _key_start(text, i)
    while i > 0 and text[i - 1] in " \t":
        i -= 1
    if i > 0 and text[i - 1] == "-":  # a YAML list item: "- password: x"
        i -= 1
        while i > 0 and text[i - 1] in " \t":
            i -= 1
    return i == 0 or text[i - 1] == "\n"


def _unquoted(m: re.Match, text: str) -> str | None:
    value = text[m.start(1) : m.end(1)]
    if _is_code_or_placeholder(value, text, m.start(1), m.end()):
        return None
    return text[m.start() : m.start(1)] + REDACTED


def _line_key(m: re.Match, text: str) -> str | None:
    raw = text[m.start(1) : m.end(1)]
    value = raw.rstrip()
    if not _starts_line(text, m.start()) or _is_code_or_placeholder(
        value, text, m.start(1), m.start(1) + len(value)
    ):
        return None
    return text[m.start() : m.start(1)] + REDACTED + raw[len(value) :]


def _is_code_or_placeholder(value: str, text: str, start: int, end: int) -> bool:
    """Whether the value after a secret-ish key is code or a stand-in rather than a secret."""
    if value.startswith(REDACTED) or value.lower().strip("[]<>") in _NOT_SECRET:
        return True
    first = _FIRST_WORD.match(value)
    if first:
        rest = value[first.end() :].lstrip()
        if first.group(0).lower() in _NOT_SECRET and rest[:1] in ("", "[", "=", "|", ",", ")"):
            return True  # password: str = ""  /  token: str | None: an annotation
        if value[first.end() : first.end() + 1] in ("[", "(") or rest[:1] == "|":
            return True  # password: Annotated[...]  /  key: get_key()  /  token: Token | None
    if end < len(text) and text[end] in "([{":
        return True  # a call, a subscript or a template
    if _PLACEHOLDER.fullmatch(value):
        return True
    if _IDENTIFIER_CHAIN.fullmatch(value):
        # An attribute (request.url.password), a variable named like a secret (password=password,
        # api_key=key), or any name in a source line of a Python traceback: a reference, not the secret.
        return "." in value or _is_reference(value) or _in_python_source_line(text, start)
    return False


def _is_reference(name: str) -> bool:
    low = name.lower()
    return _ENDS_WITH_KEYWORD.fullmatch(low) is not None or any(
        low == w or low.endswith("_" + w) for w in _REFERENCE_WORDS
    )


def _in_python_source_line(text: str, i: int) -> bool:
    """Whether position `i` is on the line after `  File "x.py", line 3, in f` (looking back 2000 chars)."""
    line = text.rfind("\n", max(0, i - 2000), i)
    if line == -1:
        return False
    low = max(0, line - 2000)
    previous = text.rfind("\n", low, line)
    if previous == -1 and low > 0:
        return False
    return _PY_FRAME_LINE.match(text, previous + 1, line) is not None


def _loose(m: re.Match, text: str) -> str | None:
    if not _looks_random(text[m.start(2) : m.end(2)]):
        return None
    return text[m.start() : m.start(2)] + REDACTED


_KEYED = (
    _Folded(_AUTH_HEADER, _auth_header),
    _Folded(_BEARER, _bearer),
    _Folded(_QUOTED, _quoted),
    _Folded(_UNQUOTED, _unquoted),
    _Folded(_LINE_KEY, _line_key),
    _Folded(_LOOSE, _loose),
)


def _looks_random(value: str) -> bool:
    body = value.rstrip("=")
    if len(body) >= 32 and _HEX.fullmatch(body):
        return any(c.isdigit() for c in body) and any(c.isalpha() for c in body)
    classes = sum(
        (any(c.islower() for c in body), any(c.isupper() for c in body), any(c.isdigit() for c in body))
    )
    if classes < 3 or sum(c.isdigit() for c in body) < 2:
        return False
    counts = Counter(body)
    entropy = -sum(n / len(body) * math.log2(n / len(body)) for n in counts.values())
    return entropy >= 3.5


def _redact_pem(text: str) -> str:
    if "PRIVATE KEY" not in text:
        return text
    out: list[str] = []
    pos = 0
    missing: set[str] = set()  # END markers known to be absent: never searched for twice (linear time)
    while (m := _PEM_BEGIN.search(text, pos)) is not None:
        end_marker = f"-----END {m.group(1)}PRIVATE KEY{m.group(2) or ''}-----"
        end = -1 if end_marker in missing else text.find(end_marker, m.end())
        if end == -1:
            missing.add(end_marker)
            end = _PEM_BODY.match(text, m.end()).end()
        body = text[m.end() : end]
        if body.strip():  # an empty body: nothing to hide (or already redacted)
            lead, trail = body[: len(body) - len(body.lstrip())], body[len(body.rstrip()) :]
            body = lead + REDACTED + trail
        out.append(text[pos : m.end()] + body)
        pos = end
    out.append(text[pos:])
    return "".join(out)
