"""The schema this pd-forensics writes (the catalog's meta and the folder's mark say it)."""

SCHEMA_VERSION = 8
