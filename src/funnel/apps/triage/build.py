"""Building a TriageService from Settings (the one place where triage settings meet the code)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from funnel.apps.factory import build_chat, build_pipeline
from funnel.apps.settings import Settings
from funnel.apps.state.alerts import open_alert_state
from funnel.apps.state.incidents import open_incidents
from funnel.apps.triage.queue import TRIAGE, TriageQueue
from funnel.apps.triage.service import TriageService
from funnel.apps.triage.slack import SlackNotifier
from funnel.errors import ConfigError


def default_repo_index(repo: Path) -> Path:
    """Where `funnel triage --repo R` keeps R's index when no --index is given: outside the repository, so
    the index never shows up in the tree it describes."""
    repo = repo.resolve()
    cache = Path(os.environ.get("FUNNEL_REPO_CACHE", Path.home() / ".cache" / "funnel" / "repos"))
    digest = hashlib.sha256(str(repo).encode()).hexdigest()[:10]
    return cache / f"{repo.name or 'root'}-{digest}"


def build_triage(settings: Settings, slack: bool = True, reranker=None, chat=None, db=None) -> TriageService:
    """The triage service of `settings`. `reranker` and `chat`, when given (by `funnel serve`, which has
    built them already), are shared instead of built twice; so is `db`, the service database (`funnel serve
    --database`), which then holds the incidents and the alert dedupe every process shares. The repository's index is `settings.index`
    when one was set, else `default_repo_index(repo)` (the one `funnel triage --repo` uses)."""
    repo = settings.triage.repo.resolve() if settings.triage.repo else None
    if repo is not None and not repo.is_dir():
        raise ConfigError(f"the repository {settings.triage.repo} is not a directory")
    webhook = settings.section("slack").webhook_url if slack else None
    if webhook and not webhook.startswith(("http://", "https://")):
        raise ConfigError("slack_webhook_url must be an http:// or https:// URL")
    if repo is not None and "index" not in settings.model_fields_set:
        settings = settings.model_copy(update={"index": default_repo_index(repo)})
    pipeline = build_pipeline(settings, **({"reranker": reranker} if reranker is not None else {}))
    return TriageService(
        pipeline,
        repo_root=repo,
        chat=chat if chat is not None else build_chat(settings),
        notifier=SlackNotifier(webhook, timeout=settings.slack.timeout_s, max_retries=settings.slack.retries,
                               state=open_alert_state(db)) if webhook else None,
        incidents=open_incidents(db, settings.triage.incidents),
    )


def queued_triage(settings: Settings, library, triage: TriageService | None = None, **shared) -> TriageQueue | None:
    """Triage with its slow steps on `library`'s job queue, run by its workers (`funnel serve`'s threads,
    `funnel worker`): `triage`, or the service `settings` configure (`shared`: `build_triage`'s reranker,
    chat and db). None when neither configures one."""
    if triage is None and settings.triage.repo is None:
        return None
    queue = TriageQueue(triage if triage is not None else build_triage(settings, **shared), library.queue)
    library.handle(TRIAGE, queue.run)
    return queue
