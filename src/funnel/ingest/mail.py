"""E-mail (.eml, one message; .mbox, a mailbox): each message a section headed by its subject.

A message's text starts with its From:, To:, Cc:, Date: and Subject: lines, then its plain body (an HTML
body, when there is no plain one, through the web-page walk, `html.html_sections`). Attachments go through
the same loaders as files: one whose name or content a row of `LOADERS` takes is written to a temporary file
and read by that row, its sections appended under "<subject> > <attachment name>"; the others (a zip, a
program, one over MAX_ATTACHMENT_BYTES, an .eml file, one its loader could not read) are listed by name in
the message's text as skipped. A message inside a message (forwarded as message/rfc822, a digest's) is read
as one, under the outer subject, up to MAX_NESTING deep. The lookup comes in as `find` (`loaders.find`),
because the loaders' table imports this module.

A mailbox is read message by message up to MAX_MESSAGES; past that the rest are counted, and a last section
(and a log warning) says how many were not read — each message stands alone, so the first ten thousand are
worth having.
"""

from __future__ import annotations

import email
import io
import logging
import mailbox
import re
import tempfile
from collections.abc import Callable
from dataclasses import replace
from email import policy
from email.message import EmailMessage
from pathlib import Path

from funnel.errors import FunnelError, IngestError
from funnel.ingest.html import html_sections
from funnel.ingest.text import file_document, read_file
from funnel.types import Kind, LoadedDocument, Section

EML = Kind("eml")
MBOX = Kind("mbox")
MAX_MESSAGES = 10_000
MAX_ATTACHMENT_BYTES = 25_000_000  # what mail services let through
MAX_NESTING = 3  # a message inside a message inside a message; deeper ones are listed as skipped
_SNIFF_BYTES = 8192  # as `loaders.SNIFF_BYTES`
_HEADERS = ("From", "To", "Cc", "Date", "Subject")
_UNSAFE_NAME = re.compile(r"[^\w.+-]+")
_log = logging.getLogger(__name__)

# loaders.find: (name, first bytes, file) -> (the loader row, its language) or None
Find = Callable[..., "tuple[object, str | None] | None"]


def load_eml(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None,
    *, find: Find | None = None,
) -> LoadedDocument:
    """One message as sections: its own, then its attachments'."""
    raw = _read(path, display_path)
    message = email.message_from_bytes(raw, policy=policy.default)
    if not any(message[name] for name in (*_HEADERS, "Message-ID")):
        raise IngestError(display_path, "not an e-mail message (no From, To, Date or Subject header)")
    sections = message_sections(message, display_path, find)
    document = file_document(doc_id, display_path, EML, raw)
    return LoadedDocument(document=replace(document, title=_subject(message) or document.title),
                          sections=tuple(sections))


def load_mbox(
    path: Path, doc_id: str, display_path: str, language: str | None = None, pages: object = None,
    *, find: Find | None = None,
) -> LoadedDocument:
    """A mailbox as one section per message (and its attachments'), the first MAX_MESSAGES of them."""
    raw = _read(path, display_path)
    if not raw.startswith(b"From "):
        raise IngestError(display_path, "not a mailbox (an mbox starts with a 'From ' line)")
    box = mailbox.mbox(str(path), create=False)
    sections: list[Section] = []
    count = 0
    try:
        for count, key in enumerate(box.iterkeys(), start=1):
            if count <= MAX_MESSAGES:
                message = email.message_from_bytes(box.get_bytes(key), policy=policy.default)
                sections += message_sections(message, f"{display_path} #{count}", find)
    finally:
        box.close()
    if not sections:
        raise IngestError(display_path, "no messages in the mailbox")
    if count > MAX_MESSAGES:
        note = f"Only the first {MAX_MESSAGES:,} of the {count:,} messages in this mailbox were read."
        _log.warning("%s: %s", display_path, note)
        sections.append(Section(text=note, heading="Not read"))
    return LoadedDocument(document=file_document(doc_id, display_path, MBOX, raw), sections=tuple(sections))


def _read(path: Path, display_path: str) -> bytes:
    raw = read_file(path, display_path)
    if not raw.strip():
        raise IngestError(display_path, "empty file")
    return raw


def message_sections(
    message: EmailMessage, display_path: str, find: Find | None, depth: int = 0
) -> list[Section]:
    """The message's section (headers, body, the attachments skipped), then its attachments' sections and
    the messages inside it (forwarded, or a digest's), each under this one's subject."""
    subject = _subject(message) or "(no subject)"
    body = message.get_body(preferencelist=("plain", "html")) or _first_text(message)
    if body is None and not message.is_multipart():  # a multipart whose boundary is missing: its raw text
        body = message
    lines = [f"{name}: {' '.join(str(message[name]).split())}" for name in _HEADERS if message[name]]
    text = _body_text(body, display_path) if body is not None else ""
    attached: list[Section] = []
    skipped: list[str] = []
    for part in _parts(message):
        name = " ".join((part.get_filename() or "").split())
        if part.get_content_type() == "message/rfc822" and depth < MAX_NESTING:
            inner = part.get_payload()
            found = message_sections(inner[0], display_path, find, depth + 1) if inner else []
        elif part is body or not (name or part.is_attachment()):
            continue
        else:
            found, reason = _attachment_sections(part, name or "unnamed attachment", display_path, find)
            if reason:
                skipped.append(f"{name or 'unnamed attachment'} ({reason})")
        attached += [replace(s, heading=" > ".join(filter(None, (subject, name, s.heading)))) for s in found]
    parts = ["\n".join(lines), text.strip()]
    if skipped:
        parts.append("Attachments skipped: " + "; ".join(skipped))
    return [Section(text="\n\n".join(p for p in parts if p), heading=subject), *attached]


def _first_text(message: EmailMessage) -> EmailMessage | None:
    """The first inline text part, for a body `get_body` does not look for (a bounce's multipart/report)."""
    return next((part for part in _parts(message) if part.get_content_maintype() == "text"
                 and not part.get_filename() and not part.is_attachment()), None)


def _parts(message: EmailMessage) -> list[EmailMessage]:
    """The message's leaf parts and the messages inside it, in order; not the parts of those messages."""
    found: list[EmailMessage] = []
    pending = list(message.iter_parts()) if message.is_multipart() else []
    while pending:
        part = pending.pop(0)
        if part.get_content_type() != "message/rfc822" and part.is_multipart():
            pending[:0] = list(part.iter_parts())
        else:
            found.append(part)
    return found


def _subject(message: EmailMessage) -> str:
    return " ".join(str(message["Subject"] or "").split())


def _body_text(part: EmailMessage, display_path: str) -> str:
    """A body part's text; an HTML one through the web-page walk, its sections' texts in order."""
    try:
        content = part.get_content()
    except (LookupError, ValueError, AssertionError):  # an unknown charset or type, a broken encoding
        content = (part.get_payload(decode=True) or b"").decode("utf-8", errors="replace")
    if part.get_content_subtype() != "html":
        return content if isinstance(content, str) else ""
    markup = content.encode("utf-8") if isinstance(content, str) else bytes(content)
    try:
        _, sections = html_sections(markup, display_path)
    except IngestError:
        return ""
    return "\n\n".join(section.text for section in sections)


def _attachment_sections(
    part: EmailMessage, name: str, display_path: str, find: Find | None
) -> tuple[list[Section], str | None]:
    """(the attachment's sections, None) when a loader reads it, else ([], why it was skipped)."""
    data = part.get_payload(decode=True)
    if not isinstance(data, bytes) or not data:
        return [], "empty" if isinstance(data, bytes) else f"a message nested more than {MAX_NESTING} deep"
    if len(data) > MAX_ATTACHMENT_BYTES:
        return [], f"over {MAX_ATTACHMENT_BYTES // 1_000_000} MB"
    found = find(Path(name), data[:_SNIFF_BYTES], io.BytesIO(data)) if find is not None else None
    if found is None:
        return [], "no loader for it"
    loader, language = found
    if loader.kind in (EML, MBOX):
        return [], "mail inside mail is not read"
    with tempfile.TemporaryDirectory(prefix="funnel-attachment-") as folder:
        path = Path(folder) / (_UNSAFE_NAME.sub("_", name)[-100:].lstrip(".") or "attachment")
        path.write_bytes(data)
        try:
            loaded = loader.read(path, "attachment", f"{display_path} > {name}", language, None)
        except FunnelError as e:  # unreadable, or its loader's library missing: the message still counts
            return [], getattr(e, "reason", str(e))
    return list(loaded.sections), None
