"""The broker's current MetadataImage, kept up to date by tailing the metadata log."""

from __future__ import annotations

import threading

from shoal.metadata.image import MetadataImage
from shoal.metadata.log import MetadataStore


class MetadataCache:
    """Holds the latest image; ``catch_up`` applies records appended since (blocking: call off-loop)."""

    def __init__(self, store: MetadataStore) -> None:
        self._store = store
        self._lock = threading.Lock()
        self.image = MetadataImage()

    def catch_up(self) -> MetadataImage:
        with self._lock:
            while True:
                records = self._store.read(self.image.offset + 1)
                if not records:
                    return self.image
                self.image = self.image.apply(records)
