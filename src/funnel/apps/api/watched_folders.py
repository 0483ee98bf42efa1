"""The watcher threads of `funnel serve --watch` (`watched.py` says what a watched collection is).

`WatchedFolders` starts one watcher thread per folder in the app's lifespan and stops them at shutdown (a
running sync is cancelled and rolls back). It opens each folder's collection through the `Library`; it is
a module of its own because the library imports `watched.py` (it opens watched collections), so that
neither imports the other back.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from funnel.apps.api.library import Library
from funnel.apps.api.watched import WatchedCollection, WatchSpec
from funnel.apps.watch import FolderWatcher
from funnel.errors import Cancelled

log = logging.getLogger("funnel.api.watch")

STOP_WAIT_S = 30.0  # at shutdown, how long a cancelled sync may take to roll back


class WatchedFolders:
    """The watcher threads of `funnel serve --watch`: started by the app's lifespan, stopped at shutdown."""

    def __init__(self, library: Library, specs: list[WatchSpec], ignore: list[Path]):
        self.library = library
        self.specs = specs
        self.ignore = ignore  # the data directory: the collections' own writes never start a sync
        self.stop = threading.Event()
        self.threads: list[threading.Thread] = []
        self.collections: list[WatchedCollection] = []
        for spec in specs:
            library.check_watch(spec.name, spec.folder)

    def start(self) -> None:
        for spec in self.specs:
            collection = self.library.watch(spec.name, spec.folder)
            assert isinstance(collection, WatchedCollection)
            collection.status.watching = True
            self.collections.append(collection)
            watcher = FolderWatcher([spec.folder], lambda c=collection: c.sync(self.stop), ignore=self.ignore,
                                    stop=self.stop, told=collection.failed)
            thread = threading.Thread(
                target=self._run, args=(watcher, collection), name=f"funnel-watch-{spec.name}", daemon=True
            )
            thread.start()
            self.threads.append(thread)

    def _run(self, watcher: FolderWatcher, collection: WatchedCollection) -> None:
        try:
            watcher.run()
        except Cancelled:
            pass  # the server is stopping; the sync rolled back
        except Exception as e:  # the watcher itself broke: say so in the status, keep serving
            log.warning("watching %s stopped", collection.folder, exc_info=True)
            collection.failed(e)
        finally:
            collection.status.watching = False

    def statuses(self) -> dict[str, dict]:
        """Each watched collection's status, for /health."""
        return {c.name: c.status.to_json() for c in self.collections}

    def close(self) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(STOP_WAIT_S)
