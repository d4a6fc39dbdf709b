"""The PostgreSQL backend of the storage seams: the store several brokers on several hosts share."""
