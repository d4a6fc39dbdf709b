"""Tiered storage (KIP-405): the RemoteStorageManager over Shoal's object storage and the
RemoteLogMetadataManager interface (its backends live in ``shoal.store``)."""
